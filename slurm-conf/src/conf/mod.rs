//! `gpu-affinity conf`: Slurm configuration generated from placement data and the
//! node's discovered topology. Every file carries core's marker line; `--write` is
//! atomic and never replaces a file without it unless `--force` ([`write`]).

pub mod write;

use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, Subcommand, ValueEnum};
use gpu_affinity::config;
use gpu_affinity::health::{Gap, Gathered};
use gpu_affinity::model::Machine;
use gpu_affinity::slurm::conf_write::{self, CoresRule, MARKER};
use gpu_affinity::slurm::hostlist;
use gpu_affinity::slurm::placement::{self, Source, UNPLACED, Unplaced};
use gpu_affinity::slurm::topology::{self, Topology};
use gpu_affinity::{sources, trust};

use crate::{CliError, emit};

/// Largest input file read (a 100k-instance AWS export is about 20 MiB).
const MAX_INPUT: u64 = 256 << 20;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// topology.conf / topology.yaml from cloud placement data or NVLink node facts.
    Topology(TopologyArgs),
    /// gres.conf GPU lines for this node (Name=gpu File=/dev/nvidiaN Cores=...).
    Gres(GresArgs),
    /// plugstack.conf with the plugin's line (after pyxis when pyxis is there).
    Plugstack(PlugstackArgs),
    /// slurm.conf lines for a working install (Prolog, Epilog, health check, topology).
    Slurm(SlurmArgs),
    /// What this node knows about itself (hostname, vendor, instance, GPUs): the
    /// `--from nvlink` input once every node's facts are collected.
    NodeFacts(NodeFactsArgs),
}

#[derive(ClapArgs, Debug)]
struct NodeFactsArgs {
    /// Read the topology under this root instead of / (a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/")]
    sysfs_root: PathBuf,
    /// The node's name [default: the kernel's hostname under the root].
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// Print JSON (the `--from nvlink` format) instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    nvml: NvmlArgs,
}

/// Where NVML comes from, for the NVLink facts NVML alone knows (fabric, GPU links).
#[derive(ClapArgs, Debug)]
struct NvmlArgs {
    /// The NVML library [default: `[nvml] library` of the admin config, else
    /// libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH")]
    nvml_library: Option<PathBuf>,
    /// The admin config naming `[nvml] library` [default: /etc/gpu-affinity/config.toml
    /// when it exists].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The uid the config must belong to (tests; root otherwise).
    #[arg(long, value_name = "UID", default_value_t = trust::ROOT, hide = true)]
    trusted_owner: u32,
}

/// NVML's bound: a wedged driver must not hang the command (Invariant 4).
const NVML_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

impl NvmlArgs {
    /// Run one NVML reader (`what` names it) on the library the flag or the config
    /// names, in a bounded thread. No NVML (a node without the driver) is no answer,
    /// said on stderr: what the command writes is valid without it.
    fn read<T: Send + 'static>(
        &self,
        what: &str,
        read: fn(Option<&Path>) -> Gathered<T>,
    ) -> Result<Option<T>, CliError> {
        let library = match &self.nvml_library {
            Some(p) => Some(p.clone()),
            None => config::locate(self.config.as_deref(), Path::new(config::DEFAULT_CONFIG))
                .map(|path| config::read_trusted(&path, self.trusted_owner))
                .transpose()?
                .and_then(|c| c.nvml.library),
        };
        match gpu_affinity_node::bounded::within(NVML_BOUND, move || read(library.as_deref())) {
            Ok(value) => Ok(Some(value)),
            Err(gap) => {
                let why = match gap {
                    Gap::Timeout { after_ms } => {
                        format!("NVML did not answer within {after_ms} ms")
                    }
                    Gap::Failed(why) | Gap::Skipped(why) | Gap::Interfered(why) => why,
                };
                eprintln!("gpu-affinity: {what} not read: {why}");
                Ok(None)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum From {
    Aws,
    Oci,
    Gcp,
    Nvlink,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Form {
    /// topology.conf, SwitchName= lines (topology/tree).
    Tree,
    /// topology.conf, BlockName= lines (topology/block): blocks = innermost shared unit.
    Block,
    /// topology.yaml (Slurm 25.05+): a `block` topology (the cluster default) and a `tree`.
    Yaml,
}

#[derive(ClapArgs, Debug)]
struct Output {
    /// Write this file atomically instead of printing (temp file beside it, renamed).
    #[arg(long, value_name = "PATH")]
    write: Option<PathBuf>,
    /// Replace a file gpu-affinity did not write (one without the marker line).
    #[arg(long, requires = "write")]
    force: bool,
}

impl Output {
    fn put(&self, text: &str) -> Result<(), CliError> {
        match &self.write {
            Some(path) => write::write_generated(path, text, self.force),
            None => emit(text),
        }
    }
}

#[derive(ClapArgs, Debug)]
struct TopologyArgs {
    /// The placement data's kind.
    #[arg(long, value_enum)]
    from: From,
    /// The placement files (aws: describe-instance-topology JSON, pages allowed; oci:
    /// {OCID: rdmaTopologyData}; gcp: {name: physical_host}; nvlink: node facts).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// `NODENAME INSTANCE_ID` per line.
    #[arg(long, value_name = "NODEMAP")]
    nodes: PathBuf,
    #[arg(long, value_enum, default_value = "block")]
    form: Form,
    /// BlockSizes= (block and yaml forms): node counts, each a power-of-two multiple of
    /// the first, as slurmctld checks them [default: Slurm's default levels from the
    /// smallest block].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    block_sizes: Option<Vec<u32>>,
    /// Nodes the placement data has no place for: refuse (stop, naming the node) or
    /// isolate (a block / leaf switch `unplaced` that joins no other).
    #[arg(long, value_enum, default_value = "refuse")]
    unplaced: UnplacedArg,
    /// yaml form: the topology partitions without `Topology=` get (`flat` for CPU and
    /// login partitions without placement data).
    #[arg(long, value_enum, default_value = "block")]
    cluster_default: ClusterDefault,
    /// The target series, for the hostlists Slurm reads back (22.05-23.02: nothing
    /// after a bracket).
    #[command(flatten)]
    series: SeriesArgs,
    #[command(flatten)]
    out: Output,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum UnplacedArg {
    Refuse,
    Isolate,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum ClusterDefault {
    Block,
    Tree,
    Flat,
}

#[derive(ClapArgs, Debug)]
struct GresArgs {
    /// Read the topology under this root instead of / (a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/")]
    sysfs_root: PathBuf,
    /// Directory of the nvidiaN device files gres.conf names.
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    dev_prefix: String,
    #[command(flatten)]
    series: SeriesArgs,
    /// Links= come from this node's NVML (GPU-to-GPU NVLinks, matched to the tree's
    /// GPUs by PCI address).
    #[command(flatten)]
    nvml: NvmlArgs,
    #[command(flatten)]
    out: Output,
}

/// Which Slurm series the file is for: it decides how `Cores=` is widened.
#[derive(ClapArgs, Debug)]
pub struct SeriesArgs {
    /// The target Slurm series (`24.11`) [default: the Slurm under --slurm-prefix; none
    /// found: a form every series accepts].
    #[arg(long, value_name = "MAJOR.MINOR")]
    slurm_series: Option<String>,
    /// Where to look for the local Slurm when --slurm-series is not given.
    #[arg(long, value_name = "DIR", default_value = "/usr")]
    slurm_prefix: PathBuf,
}

impl SeriesArgs {
    /// The target series as (major, minor, where it came from), if anyone can tell.
    fn series(&self) -> Result<Option<(u32, u32, String, String)>, CliError> {
        let found = match &self.slurm_series {
            Some(s) => Some((s.clone(), "--slurm-series".to_string())),
            None => std::fs::canonicalize(&self.slurm_prefix)
                .ok()
                .and_then(|real| crate::install::find_series(&real).ok()),
        };
        let Some((series, from)) = found else {
            return Ok(None);
        };
        let (major, minor) = series
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
            .ok_or_else(|| {
                CliError(format!(
                    "--slurm-series {series:?}: give MAJOR.MINOR, e.g. 24.11"
                ))
            })?;
        Ok(Some((major, minor, series, from)))
    }

    /// The hostlist form the target series reads, and a comment line naming it.
    pub fn hostlist_form(&self) -> Result<(hostlist::Form, String), CliError> {
        Ok(match self.series()? {
            None => (
                hostlist::Form::ANY_SERIES,
                "# No Slurm found: hostlists in the form every series reads.\n".into(),
            ),
            Some((major, minor, series, from)) => (
                hostlist::Form::for_series(major, minor),
                format!("# Hostlists for Slurm {series} (from {from}).\n"),
            ),
        })
    }

    /// The `Cores=` rule of the target series, and a comment line naming it.
    fn cores_rule(&self) -> Result<(CoresRule, String), CliError> {
        let Some((major, minor, series, from)) = self.series()? else {
            return Ok((
                CoresRule::ANY_SERIES,
                "# No Slurm found: Cores= in the form every series accepts (one whole socket, else all cores).\n".into(),
            ));
        };
        let rule = CoresRule::for_series(major, minor);
        let what = match rule {
            CoresRule::Any => "the GPU's NUMA node's cores",
            CoresRule::WholeSockets => "widened to whole sockets",
            CoresRule::OneSocketOrAll => "widened to one whole socket, else all cores",
        };
        Ok((
            rule,
            format!("# For Slurm {series} (from {from}): Cores= {what}.\n"),
        ))
    }
}

#[derive(ClapArgs, Debug)]
struct PlugstackArgs {
    /// The installed plugin (absolute: configless nodes resolve nothing else).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_affinity.so"
    )]
    plugin: String,
    /// An existing plugstack.conf to add the line to (kept otherwise byte for byte).
    #[arg(long, value_name = "FILE")]
    existing: Option<PathBuf>,
    /// Plugin arguments, key=value (`mode=prefer`).
    #[arg(value_name = "KEY=VALUE")]
    plugin_args: Vec<String>,
    #[command(flatten)]
    out: Output,
}

#[derive(ClapArgs, Debug)]
struct SlurmArgs {
    /// Where the gpu-affinity-prolog, -epilog and -health binaries are installed (the
    /// package puts them in /usr/libexec/gpu-affinity).
    #[arg(long, value_name = "DIR", default_value = "/usr/libexec/gpu-affinity")]
    bin_dir: String,
    /// The topology file you generate with `conf topology` (none: no topology lines).
    #[arg(long, value_enum)]
    topology: Option<Form>,
    /// Add this node's NodeName line (sockets, cores, threads, GPUs), in the socket
    /// view `conf gres` widens Cores= to.
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// Read the node's topology for --node-name under this root instead of /.
    #[arg(long, value_name = "DIR", default_value = "/", requires = "node_name")]
    sysfs_root: PathBuf,
}

fn read_input(path: &Path) -> Result<String, CliError> {
    trust::open_regular(path)
        .and_then(|f| trust::read_bounded_text(f, MAX_INPUT))
        .map_err(|e| CliError(format!("{}: {e}", path.display())))
}

pub fn run(args: &Args) -> Result<(), CliError> {
    match &args.what {
        What::Topology(a) => run_topology(a),
        What::Gres(a) => {
            let machine = read_machine(&a.sysfs_root)?;
            let (rule, note) = a.series.cores_rule()?;
            let header = format!(
                "{MARKER}\n# gres.conf GPU lines for this node; Cores= are Slurm core ids.\n{note}"
            );
            let nvlinks = a
                .nvml
                .read("NVLinks", gpu_affinity_node::nvml::read_nvlink_peers)?
                .unwrap_or_default();
            a.out.put(&conf_write::gres_conf(
                &machine,
                &a.dev_prefix,
                &header,
                rule,
                &nvlinks,
            )?)
        }
        What::Plugstack(a) => {
            let line = conf_write::plugstack_line(&a.plugin, &a.plugin_args)?;
            let existing = match &a.existing {
                Some(p) => read_input(p)?,
                None => String::new(),
            };
            let body: String = existing
                .lines()
                .filter(|l| l.trim_end() != MARKER)
                .map(|l| format!("{l}\n"))
                .collect();
            a.out.put(&format!(
                "{MARKER}\n{}",
                conf_write::plugstack_conf(&body, &line)
            ))
        }
        What::Slurm(a) => {
            let mut text = slurm_snippet(&a.bin_dir, a.topology);
            if let Some(name) = &a.node_name {
                let machine = read_machine(&a.sysfs_root)?;
                text.push_str(
                    "# This node's layout, in the sockets `conf gres` widens Cores= to (Slurm\n\
                     # 24.11+ set a node INVAL whose Cores= split a socket). Add RealMemory=.\n",
                );
                text.push_str(&conf_write::node_line(&machine, name)?);
                text.push('\n');
            }
            emit(&text)
        }
        What::NodeFacts(a) => node_facts(a),
    }
}

fn read_machine(root: &Path) -> Result<Machine, CliError> {
    sources::sysfs::read_machine(root).map_err(|e| CliError(format!("{}: {e}", root.display())))
}

fn node_facts(a: &NodeFactsArgs) -> Result<(), CliError> {
    let machine = read_machine(&a.sysfs_root)?;
    let hostname = match &a.hostname {
        Some(h) => h.clone(),
        None => read_input(&a.sysfs_root.join("proc/sys/kernel/hostname"))
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    };
    if hostname.is_empty() {
        return Err(CliError("cannot tell the hostname; give --hostname".into()));
    }
    // Without NVML the facts are still valid input; `--from nvlink` names such nodes.
    let fabrics = a
        .nvml
        .read("NVLink fabric", gpu_affinity_node::nvml::read_fabrics)?
        .unwrap_or_default();
    let facts = placement::node_facts(&machine, &hostname, &fabrics);
    if a.json {
        return emit(&(serde_json::to_string_pretty(&facts)? + "\n"));
    }
    let mut out = format!(
        "hostname: {}\nvendor: {}\ninstance type: {}\n",
        facts.hostname,
        facts.vendor.as_deref().unwrap_or("unknown"),
        facts.instance_type.as_deref().unwrap_or("unknown")
    );
    for g in &facts.gpus {
        out.push_str(&format!(
            "GPU {} (nvidia{}): {}\n",
            g.pci.as_deref().unwrap_or("?"),
            g.minor.map_or("?".into(), |m| m.to_string()),
            g.fabric
                .as_ref()
                .map_or("no NVLink fabric known".into(), |f| format!(
                    "cluster {} clique {}",
                    f.cluster_uuid, f.clique_id
                ))
        ));
    }
    emit(&out)
}

fn run_topology(a: &TopologyArgs) -> Result<(), CliError> {
    let source = match a.from {
        From::Aws => Source::Aws,
        From::Oci => Source::Oci,
        From::Gcp => Source::Gcp,
        From::Nvlink => Source::Nvlink,
    };
    let files = a
        .files
        .iter()
        .map(|p| Ok((p.display().to_string(), read_input(p)?)))
        .collect::<Result<Vec<_>, CliError>>()?;
    let nodemap = read_input(&a.nodes)?;
    let unplaced = match a.unplaced {
        UnplacedArg::Refuse => Unplaced::Refuse,
        UnplacedArg::Isolate => Unplaced::Isolate,
    };
    let placement = placement::place_with(source, &files, &nodemap, unplaced)
        .map_err(|e| CliError(e.to_string()))?;
    for (node, why) in &placement.unplaced {
        eprintln!("gpu-affinity: node {node} isolated ({UNPLACED}): {why}");
    }
    if a.block_sizes.is_some() && a.form == Form::Tree {
        return Err(CliError("--block-sizes needs --form block or yaml".into()));
    }
    let (form, form_note) = a.series.hostlist_form()?;
    let header = |notes: &str| {
        format!(
            "{MARKER}\n# From --from {} placement data for {} nodes; unit names map to the vendor's ids:\n{notes}{form_note}",
            source.name(),
            placement.placed.len() + placement.unplaced.len()
        )
    };
    let err = |e: topology::TopologyError| CliError(e.to_string());
    let text = match a.form {
        Form::Block => {
            let (t, notes) =
                placement::blocks_of(&placement, "block", a.block_sizes.as_deref()).map_err(err)?;
            topology::write_conf_in(&t, &header(&notes), form)
        }
        Form::Tree => {
            let (t, notes) = placement::tree_of(&placement, "tree");
            topology::write_conf_in(&t, &header(&notes), form)
        }
        Form::Yaml => {
            let (mut b, block_notes) =
                placement::blocks_of(&placement, "block", a.block_sizes.as_deref()).map_err(err)?;
            let (mut t, tree_notes) = placement::tree_of(&placement, "tree");
            // For partitions without placement data (CPU, login): `Topology=flat`.
            let mut flat = Topology {
                name: "flat".into(),
                cluster_default: false,
                kind: topology::Kind::Flat,
            };
            match a.cluster_default {
                ClusterDefault::Block => b.cluster_default = true,
                ClusterDefault::Tree => t.cluster_default = true,
                ClusterDefault::Flat => flat.cluster_default = true,
            }
            let all: [Topology; 3] = [b, t, flat];
            topology::write_yaml_in(&all, &header(&format!("{block_notes}{tree_notes}")), form)
        }
    }
    .map_err(err)?;
    a.out.put(&text)
}

fn slurm_snippet(bin_dir: &str, topology: Option<Form>) -> String {
    let bin = bin_dir.trim_end_matches('/');
    let mut out = format!(
        "{MARKER}\n\
         # slurm.conf lines for gpu-affinity. The prolog runs at allocation (Alloc) so a bad node\n\
         # is drained before any step lands on it; its checks are bounded well below the timeout.\n\
         Prolog={bin}/gpu-affinity-prolog\n\
         Epilog={bin}/gpu-affinity-epilog\n\
         PrologFlags=Alloc\n\
         PrologEpilogTimeout=120\n\
         HealthCheckProgram={bin}/gpu-affinity-health\n\
         HealthCheckInterval=300\n\
         HealthCheckNodeState=ANY\n\
         GresTypes=gpu\n"
    );
    match topology {
        Some(Form::Tree) => out.push_str("# topology.conf from `gpu-affinity conf topology --form tree`\nTopologyPlugin=topology/tree\n"),
        Some(Form::Block) => out.push_str("# topology.conf from `gpu-affinity conf topology --form block`\nTopologyPlugin=topology/block\n"),
        Some(Form::Yaml) => out.push_str(
            "# topology.yaml (Slurm 25.05+) next to slurm.conf names its own plugins and wins over\n\
             # topology.conf: no TopologyPlugin= line. Partitions pick one with Topology=block|tree.\n",
        ),
        None => {}
    }
    out
}
