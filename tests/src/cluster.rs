//! A throwaway one-node Slurm cluster: private munged, slurmctld and slurmd in a temp
//! dir, fake GPU device nodes, and (optionally) gpu_affinity.so on the plugstack.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::stat::{Mode, SFlag, makedev, mknod};

use crate::conf::{self, GresLine, NodeShape, SlurmConf, TaskPlugin};
use crate::daemon::{Daemon, STOP_GRACE};
use crate::error::{Context, HarnessError, Result};
use crate::lock::ClusterLock;
use crate::plugin::{self, Variant};
use crate::prereq::{self, Programs};
use crate::report::{PROBE, StepOutput};
use crate::series::SlurmSeries;
use crate::{harness_err, ports};

/// Character-device major number of /dev/nvidiaN.
const NVIDIA_MAJOR: u64 = 195;
/// How long slurmd may take to register and show `idle`.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on a client command (srun, sbatch, scontrol, ...).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
/// Keep the cluster's directory after the test (its path is printed) for debugging.
pub const KEEP_ENV: &str = "GPU_AFFINITY_KEEP_CLUSTER";
/// PATH for daemons and clients: the harness clears the environment so nothing from
/// the caller (an outer Slurm job's SLURM_*, a user's SLURM_GPU_AFFINITY) leaks in.
const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The plugin a cluster loads and its plugstack.conf arguments.
#[derive(Debug, Clone)]
pub struct PluginSetup {
    pub variant: Variant,
    /// `key=value` arguments, in order, after the harness's own `sysfs_root=`.
    pub args: Vec<(String, String)>,
}

/// How to build a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    task_plugin: TaskPlugin,
    shape: Option<NodeShape>,
    gpus: u32,
    /// gres.conf's GPU lines; `None`: one line listing every fake device in order.
    gres: Option<Vec<GresLine>>,
    /// slurm.conf `GresTypes=gpu` (default on).
    gres_types: bool,
    plugin: Option<PluginSetup>,
    sysfs: Option<SysfsSource>,
    slurmd_debug: String,
    /// `None`: [`crate::series::SERIES_ENV`], else this machine's own Slurm.
    series: Option<String>,
    contain_spank: bool,
    /// Several nodes on this machine (`slurmd -N NAME` each); empty: one node named
    /// after this host.
    nodes: Vec<String>,
    /// Files written next to slurm.conf after the harness's own (topology.conf, a
    /// generated gres.conf), `@CLUSTER_DIR@` replaced by the cluster's dir.
    conf_files: Vec<(String, String)>,
    /// Extra slurm.conf lines before the node lines (`TopologyPlugin=topology/block`).
    conf_lines: Vec<String>,
    health: Option<HealthSetup>,
    /// Lines appended at the end of slurm.conf, after the partition (node records
    /// without a slurmd and their partition).
    tail_lines: Vec<String>,
    /// slurmd started with `--conf-server` (configless, as HyperPod and slurm-gcp run
    /// compute nodes): see [`ClusterBuilder::configless`].
    configless: bool,
}

/// The suite's health binaries as Slurm runs them: `Prolog=`, `Epilog=`,
/// `HealthCheckProgram=` (each optional), reading the admin config at `config`.
#[derive(Debug, Clone)]
pub struct HealthSetup {
    /// The admin config (root-owned, not group/other-writable), passed as `--config`.
    pub config: PathBuf,
    pub prolog: bool,
    pub epilog: bool,
    /// `HealthCheckProgram=` with this `HealthCheckInterval=` (seconds).
    pub health_interval: Option<u32>,
}

#[derive(Debug, Clone)]
enum SysfsSource {
    /// A ready tree (e.g. written by `gpu-affinity fixture`).
    Dir(PathBuf),
    /// A machine description the harness writes into the cluster dir.
    Machine(Box<gpu_affinity::model::Machine>),
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterBuilder {
    /// A node shaped like this machine, 8 fake GPUs, `task/none`, no plugin.
    pub fn new() -> Self {
        Self {
            task_plugin: TaskPlugin::None,
            shape: None,
            gpus: 8,
            gres: None,
            gres_types: true,
            plugin: None,
            sysfs: None,
            slurmd_debug: "info".to_owned(),
            series: None,
            contain_spank: false,
            nodes: Vec::new(),
            conf_files: Vec::new(),
            conf_lines: Vec::new(),
            health: None,
            tail_lines: Vec::new(),
            configless: false,
        }
    }

    /// Configless compute nodes, as HyperPod and slurm-gcp run them: slurmctld has
    /// `SlurmctldParameters=enable_configless`, and each slurmd starts with only
    /// `--conf-server 127.0.0.1:PORT` and `--authinfo socket=...` (the test's own munged)
    /// and no `-f`, so it fetches slurm.conf, plugstack.conf, gres.conf, cgroup.conf and
    /// the topology files from slurmctld into `SlurmdSpoolDir/conf-cache` and the node's
    /// slurmstepd, plugin, prolog and health program read them from there. slurm.conf then
    /// names no `PlugStackConfig=`: plugstack.conf is the one beside slurm.conf, which is
    /// what slurmctld serves.
    pub fn configless(mut self) -> Self {
        self.configless = true;
        self
    }

    /// Append a line to slurm.conf (e.g. node records without a slurmd, and a partition
    /// holding them, for a fleet whose other nodes only slurmctld knows).
    pub fn slurm_conf_line(mut self, line: &str) -> Self {
        self.tail_lines.push(line.to_owned());
        self
    }

    /// Run the suite's health binaries from slurmd (see [`HealthSetup`]). Slurm gives
    /// Prolog=/Epilog=/HealthCheckProgram= no arguments, so each is a two-line wrapper in
    /// the cluster's lib/ that passes `--config`, records the environment slurmd gave it
    /// (`log/NAME.env`) and appends the program's output to `log/NAME.out`.
    pub fn health_programs(mut self, setup: HealthSetup) -> Self {
        self.health = Some(setup);
        self
    }

    /// `SlurmdParameters=contain_spank` with a tmpfs job container (Slurm 24.05+; an
    /// older series fails to start, so callers check [`Cluster::slurm_at_least`] first
    /// via [`SlurmSeries`]).
    pub fn contain_spank(mut self) -> Self {
        self.contain_spank = true;
        self
    }

    /// Run this Slurm series (`22.05`, `24.11`, `26.05`) instead of the one
    /// `GPU_AFFINITY_SLURM_SERIES` selects (see [`crate::series`]).
    pub fn slurm_series(mut self, series: &str) -> Self {
        self.series = Some(series.to_owned());
        self
    }

    pub fn task_plugin(mut self, task_plugin: TaskPlugin) -> Self {
        self.task_plugin = task_plugin;
        self
    }

    /// Report a node of this shape instead of the real one (see [`NodeShape::Emulated`]).
    pub fn shape(mut self, shape: NodeShape) -> Self {
        self.shape = Some(shape);
        self
    }

    /// Number of fake GPUs (`DIR/dev/nvidia0..N-1`, minors 0..N-1).
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.gpus = gpus;
        self
    }

    /// gres.conf's GPU lines over the fake devices (order, subsets, holes, lines for
    /// other nodes); slurm.conf's `Gres=gpu:N` follows the lines for this node. The
    /// fake devices stay `dev/nvidia0..N-1` for N from [`Self::gpus`] / the machine, so a
    /// device no line lists still exists (and, unlisted, is not confined).
    pub fn gres_layout(mut self, lines: Vec<GresLine>) -> Self {
        self.gres = Some(lines);
        self
    }

    /// A cluster without gres: no `GresTypes=gpu` and no GPU lines, so Slurm passes a
    /// user's own `SLURM_STEP_GPUS` through to the plugin (hostile-input tests).
    pub fn without_gres(mut self) -> Self {
        self.gres_types = false;
        self.gres = Some(Vec::new());
        self
    }

    /// Load gpu_affinity.so (the normal debug build unless [`Self::plugin_variant`]).
    pub fn with_plugin(mut self) -> Self {
        self.plugin.get_or_insert(PluginSetup {
            variant: Variant::Debug,
            args: Vec::new(),
        });
        self
    }

    pub fn plugin_variant(mut self, variant: Variant) -> Self {
        self.with_plugin_mut().variant = variant;
        self
    }

    /// Add a plugstack.conf argument (`default=strict`, `test_panic=task_init`, ...).
    pub fn plugin_arg(mut self, key: &str, value: &str) -> Self {
        self.with_plugin_mut()
            .args
            .push((key.to_owned(), value.to_owned()));
        self
    }

    fn with_plugin_mut(&mut self) -> &mut PluginSetup {
        self.plugin.get_or_insert(PluginSetup {
            variant: Variant::Debug,
            args: Vec::new(),
        })
    }

    /// The node's topology: this machine description, written as a sysfs tree into
    /// the cluster dir and passed to the plugin as `sysfs_root=`. Also sets the number
    /// of fake GPUs to the machine's.
    pub fn machine(mut self, machine: gpu_affinity::model::Machine) -> Self {
        self.gpus = u32::try_from(machine.gpus.len()).unwrap_or(u32::MAX);
        self.sysfs = Some(SysfsSource::Machine(Box::new(machine)));
        self
    }

    /// The node's topology: an existing sysfs-shaped tree.
    pub fn sysfs_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sysfs = Some(SysfsSource::Dir(dir.into()));
        self
    }

    /// SlurmdDebug (default `info`); `verbose` shows the plugin's per-step summary.
    /// Run these node names, one `slurmd -N NAME` each (all on this machine, address
    /// 127.0.0.1, a port each). The cluster's [`Cluster::node`] is the first.
    pub fn nodes(mut self, names: &[&str]) -> Self {
        self.nodes = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Write `name` next to slurm.conf (after gres.conf, so it may replace it), with
    /// `@CLUSTER_DIR@` in `text` replaced by the cluster's dir.
    pub fn conf_file(mut self, name: &str, text: &str) -> Self {
        self.conf_files.push((name.to_owned(), text.to_owned()));
        self
    }

    /// One more slurm.conf line, before the node lines.
    pub fn conf_line(mut self, line: &str) -> Self {
        self.conf_lines.push(line.to_owned());
        self
    }

    pub fn slurmd_debug(mut self, level: &str) -> Self {
        self.slurmd_debug = level.to_owned();
        self
    }

    /// Start the cluster; a missing prerequisite is an error saying what to install.
    pub fn start(self) -> Result<Cluster> {
        let series = match &self.series {
            Some(name) => SlurmSeries::named(name)?,
            None => SlurmSeries::from_env()?,
        };
        let programs = match &series.install {
            Some(install) => prereq::check_install(install)?,
            None => prereq::check_in(series.prefix())?,
        };
        Cluster::start(self, programs, series)
    }

    /// Like [`Self::start`], but `None` (with a note on stderr) when the developer set
    /// [`prereq::SKIP_ENV`]. Tests use this; it never skips silently.
    pub fn start_or_skip(self, test: &str) -> Result<Option<Cluster>> {
        if prereq::skip_requested() {
            eprintln!(
                "SKIPPED {test}: {} is set (real-Slurm tests disabled on this machine)",
                prereq::SKIP_ENV
            );
            return Ok(None);
        }
        if self.configless {
            let series = match &self.series {
                Some(name) => SlurmSeries::named(name)?,
                None => SlurmSeries::from_env()?,
            };
            if series.name == "22.05" {
                // Its munge plugin takes the socket only from the config it has not
                // fetched yet, so a configless 22.05 node can reach only the system munged.
                eprintln!(
                    "SKIPPED {test}: Slurm 22.05's slurmd has no --authinfo (usage lists none), \
                     so a configless node cannot name the cluster's own munge socket; the \
                     configless tests run on 24.11, 25.11 and 26.05"
                );
                return Ok(None);
            }
        }
        self.start().map(Some)
    }
}

/// A running cluster. Dropping it stops slurmd, slurmctld and munged (in that order)
/// and removes its directory.
pub struct Cluster {
    programs: Programs,
    series: SlurmSeries,
    /// `slurmd -V` of the running series: (major, minor, patch).
    version: (u32, u32, u32),
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    conf: PathBuf,
    plugstack: PathBuf,
    node: String,
    /// Every node's name when the cluster runs several (`slurmd -N`); empty for one.
    nodes: Vec<String>,
    gpus: u32,
    gres: Vec<GresLine>,
    sysfs_root: Option<PathBuf>,
    plugin_path: Option<PathBuf>,
    plugin_args: Vec<(String, String)>,
    shape: NodeShape,
    /// munged, slurmctld, slurmd: stopped in reverse.
    daemons: Vec<Daemon>,
    /// The tmpfs job containers' base dir (as seen from here), removed after the daemons.
    container_base: Option<PathBuf>,
    /// Configless nodes: slurmctld's port and the munge socket slurmd is started with.
    configless: Option<(u16, PathBuf)>,
    _lock: ClusterLock,
}

impl Cluster {
    fn start(b: ClusterBuilder, programs: Programs, series: SlurmSeries) -> Result<Self> {
        let lock = ClusterLock::acquire()?;
        let dir = tempfile::Builder::new()
            .prefix("gpu-affinity-cluster.")
            .tempdir()
            .context(|| "create the cluster's temp dir".to_owned())?;
        let path = dir.path().to_path_buf();
        // Users other than root (the nobody test) must reach the config, munge socket
        // and plugin; the dir holds nothing secret except the 0400 munge key.
        set_mode(&path, 0o755)?;
        for sub in ["munge", "state", "spool", "run", "log", "dev", "lib"] {
            mkdir(&path.join(sub), 0o755)?;
        }
        for sub in ["work", "jobs"] {
            mkdir(&path.join(sub), 0o1777)?;
        }
        let probe = path.join("lib/probe.sh");
        write(
            &probe,
            &format!(
                "#!/bin/sh\nGA_DEV_DIR={}\n{PROBE}\n",
                path.join("dev").display()
            ),
        )?;
        set_mode(&probe, 0o755)?;

        let host = short_hostname()?;
        let node = b.nodes.first().cloned().unwrap_or_else(|| host.clone());
        // SlurmdSpoolDir is `spool/%n`; slurmd logs an error when it has to create it.
        for n in b.nodes.iter().chain(std::iter::once(&node)) {
            if !path.join("spool").join(n).exists() {
                mkdir(&path.join("spool").join(n), 0o755)?;
            }
        }
        let mut cluster = Cluster {
            programs,
            series,
            version: (0, 0, 0),
            dir: Some(dir),
            conf: path.join("slurm.conf"),
            plugstack: path.join("plugstack.conf"),
            path,
            node,
            nodes: b.nodes.clone(),
            gpus: b.gpus,
            gres: Vec::new(),
            sysfs_root: None,
            plugin_path: None,
            plugin_args: Vec::new(),
            shape: NodeShape::Real {
                sockets: 1,
                cores_per_socket: 1,
                threads_per_core: 1,
            },
            daemons: Vec::new(),
            container_base: None,
            configless: None,
            _lock: lock,
        };
        cluster.version = cluster.slurmd_version()?;
        let running = format!("{}.{:02}", cluster.version.0, cluster.version.1);
        if cluster.series.explicit && running != cluster.series.name {
            return Err(harness_err!(
                "asked for Slurm {} but {} is Slurm {running}",
                cluster.series.name,
                cluster.programs.slurmd.display()
            ));
        }
        cluster.start_munge()?;
        cluster.make_fake_gpus()?;
        cluster.sysfs_root = match b.sysfs {
            None => None,
            Some(SysfsSource::Dir(d)) => Some(d),
            Some(SysfsSource::Machine(m)) => {
                let root = cluster.path.join("sysfs");
                crate::fixture::write_sysfs(&m, &root)?;
                Some(root)
            }
        };
        if let Some(setup) = &b.plugin {
            // A private copy: a rebuild during the test cannot swap the library under
            // a running slurmstepd, and user nobody's srun can read it.
            let built = if cluster.series.explicit {
                plugin::plugin_for_series(setup.variant, &cluster.series.name)?
            } else {
                plugin::plugin(setup.variant)?
            };
            let copy = cluster.path.join("lib/gpu_affinity.so");
            fs::copy(&built, &copy)
                .context(|| format!("copy {} to {}", built.display(), copy.display()))?;
            set_mode(&copy, 0o755)?;
            let mut args = Vec::new();
            if let Some(root) = &cluster.sysfs_root {
                args.push(("sysfs_root".to_owned(), root.display().to_string()));
            }
            args.extend(setup.args.iter().cloned());
            cluster.plugin_path = Some(copy);
            cluster.plugin_args = args;
        }
        cluster.write_plugstack(cluster.plugin_path.is_some())?;
        let mut extra = match &b.health {
            Some(h) => cluster.health_wrappers(h)?,
            None => Vec::new(),
        };
        extra.extend(b.tail_lines.iter().cloned());

        let shape = match b.shape {
            Some(s) => s,
            None => cluster.real_shape()?,
        };
        if matches!(shape, NodeShape::Emulated { .. }) && b.task_plugin != TaskPlugin::None {
            return Err(harness_err!(
                "an emulated node shape needs TaskPlugin::None (task/affinity cannot lay out \
                 tasks on CPUs the machine does not have)"
            ));
        }
        cluster.shape = shape.clone();
        let gres = b.gres.clone().unwrap_or_else(|| {
            if b.nodes.is_empty() {
                conf::default_gres_layout(b.gpus)
            } else {
                // Several nodes share the fake devices: one line for every node.
                let minors: Vec<u32> = (0..b.gpus).collect();
                vec![GresLine::every_node(&minors)]
            }
        });
        cluster.gres = gres.clone();
        let (ctld_port, slurmd_port) = ports::pick_pair()?;
        let node_ports = if b.nodes.is_empty() {
            Vec::new()
        } else {
            ports::pick_run(b.nodes.len())?
        };
        let cluster_name = format!("gat{}", std::process::id());
        let munge_socket = cluster.path.join("munge/munge.socket");
        let slurm_conf = SlurmConf {
            cluster_name: &cluster_name,
            node: &cluster.node,
            ctld_port,
            slurmd_port,
            dir: &cluster.path,
            munge_socket: &munge_socket,
            plugstack: &cluster.plugstack,
            shape: &shape,
            task_plugin: b.task_plugin,
            gpus: conf::gres_count(&gres),
            gres_types: b.gres_types,
            slurmd_debug: &b.slurmd_debug,
            contain_spank: b
                .contain_spank
                .then_some((cluster.version.0, cluster.version.1)),
            nodes: &b.nodes,
            node_ports: &node_ports,
            host: &host,
            extra_lines: &b.conf_lines,
            extra: &extra,
            configless: b.configless,
        }
        .render();
        cluster.configless = b.configless.then_some((ctld_port, munge_socket.clone()));
        write(&cluster.conf, &slurm_conf)?;
        write(
            &cluster.path.join("gres.conf"),
            &conf::gres_conf(&cluster.node, &cluster.path.join("dev"), &gres),
        )?;
        if b.contain_spank {
            // Inside a root, on the root's own filesystem: 26.05's namespace/tmpfs
            // cannot bind its namespace holder under the /tmp bind mount ("ns base
            // mount failed: Invalid argument", measured); 24.11 can, either way.
            let (base, on_host) = match &cluster.series.root {
                Some(root) => {
                    let name = cluster
                        .path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let inside = PathBuf::from("/var/lib/gpu-affinity-containers").join(name);
                    let on_host = root.dir().join(inside.strip_prefix("/").unwrap_or(&inside));
                    (inside, on_host)
                }
                None => {
                    let base = cluster.path.join("containers");
                    (base.clone(), base)
                }
            };
            mkdir(&on_host, 0o755)?;
            cluster.container_base = Some(on_host);
            write(
                &cluster.path.join("job_container.conf"),
                &conf::job_container_conf(&base),
            )?;
        }
        write(
            &cluster.path.join("cgroup.conf"),
            &conf::cgroup_conf(b.task_plugin),
        )?;
        for (name, text) in &b.conf_files {
            let dir = cluster.path.display().to_string();
            write(
                &cluster.path.join(name),
                &text.replace("@CLUSTER_DIR@", &dir),
            )?;
        }

        cluster.start_slurm()?;
        Ok(cluster)
    }

    /// Copy the health binaries into lib/ (a rooted series sees only /tmp; all three, so a
    /// test can also run one the way slurmd would) and write wrappers for those Slurm runs;
    /// the slurm.conf lines that run them.
    fn health_wrappers(&self, h: &HealthSetup) -> Result<Vec<String>> {
        let (prolog, epilog, health) = plugin::health_binaries()?;
        for (bin, name) in [
            (&prolog, "gpu-affinity-prolog"),
            (&epilog, "gpu-affinity-epilog"),
            (&health, "gpu-affinity-health"),
        ] {
            let copy = self.path.join("lib").join(name);
            fs::copy(bin, &copy)
                .context(|| format!("copy {} to {}", bin.display(), copy.display()))?;
            set_mode(&copy, 0o755)?;
        }
        let mut lines = Vec::new();
        let mut wrap = |name: &str, key: &str| -> Result<()> {
            let copy = self.path.join("lib").join(name);
            let log = self.path.join("log");
            let script = self.path.join("lib").join(format!("{name}.sh"));
            write(
                &script,
                &format!(
                    "#!/bin/sh\nenv > {env}\n\"{bin}\" --config \"{cfg}\" >> {out} 2>&1\nrc=$?\necho \"exit $rc\" >> {out}\nexit $rc\n",
                    env = log.join(format!("{name}.env")).display(),
                    out = log.join(format!("{name}.out")).display(),
                    bin = copy.display(),
                    cfg = h.config.display(),
                ),
            )?;
            set_mode(&script, 0o755)?;
            lines.push(format!("{key}={}", script.display()));
            Ok(())
        };
        if h.prolog {
            wrap("gpu-affinity-prolog", "Prolog")?;
        }
        if h.epilog {
            wrap("gpu-affinity-epilog", "Epilog")?;
        }
        if let Some(interval) = h.health_interval {
            wrap("gpu-affinity-health", "HealthCheckProgram")?;
            lines.push(format!("HealthCheckInterval={interval}"));
        }
        Ok(lines)
    }

    fn start_munge(&mut self) -> Result<()> {
        let key = self.path.join("munge/munge.key");
        let out = self
            .series
            .command(&self.programs.timeout, None)
            .args(["-k", "5", "20"])
            .arg(&self.programs.mungekey)
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .output()
            .context(|| "run mungekey".to_owned())?;
        if !out.status.success() {
            return Err(harness_err!(
                "mungekey --create failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        set_mode(&key, 0o400)?;
        let socket = self.path.join("munge/munge.socket");
        let mut cmd = self.series.command(&self.programs.munged, None);
        cmd.env_clear()
            .env("PATH", CLEAN_PATH)
            .arg("-F")
            // Credentials name the loopback address, which every series' slurmctld looks
            // up in /etc/hosts (24.11+ reverse-resolves each credential's origin); left to
            // munged, a Debian root's picked 0.0.0.0, a lookup that went to DNS.
            .arg("--origin=127.0.0.1")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--log-file={}",
                self.path.join("log/munged.log").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.path.join("run/munged.pid").display()
            ))
            .arg(format!(
                "--seed-file={}",
                self.path.join("munge/munged.seed").display()
            ));
        let daemon = Daemon::spawn("munged", cmd, &self.path.join("log/munged.out"))?;
        self.daemons.push(daemon);
        self.wait_for(
            "munged to create its socket",
            Duration::from_secs(10),
            |c| Ok(socket.exists()).and_then(|up| c.check_daemons().map(|()| up)),
        )
    }

    fn make_fake_gpus(&self) -> Result<()> {
        for minor in 0..self.gpus {
            let node = self.path.join(format!("dev/nvidia{minor}"));
            mknod(
                &node,
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                makedev(NVIDIA_MAJOR, u64::from(minor)),
            )
            .context(|| format!("mknod {} c {NVIDIA_MAJOR} {minor}", node.display()))?;
        }
        Ok(())
    }

    fn real_shape(&self) -> Result<NodeShape> {
        let out = self
            .series
            .command(&self.programs.timeout, None)
            .args(["-k", "5", "20"])
            .arg(&self.programs.slurmd)
            .arg("-C")
            .env_clear()
            .env("PATH", CLEAN_PATH)
            .output()
            .context(|| "run slurmd -C".to_owned())?;
        let text = String::from_utf8_lossy(&out.stdout);
        NodeShape::from_slurmd_c(&text)
            .ok_or_else(|| harness_err!("cannot read the node shape from `slurmd -C`: {text:?}"))
    }

    /// `slurmd -V` ("slurm 24.11.5") of the series this cluster runs.
    fn slurmd_version(&self) -> Result<(u32, u32, u32)> {
        let out = self
            .series
            .command(&self.programs.timeout, None)
            .args(["-k", "5", "20"])
            .arg(&self.programs.slurmd)
            .arg("-V")
            .env_clear()
            .env("PATH", CLEAN_PATH)
            .output()
            .context(|| "run slurmd -V".to_owned())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten(), parts.next()) {
            (Some(major), Some(minor), patch) => Ok((major, minor, patch.flatten().unwrap_or(0))),
            _ => Err(harness_err!(
                "cannot read the Slurm version from `slurmd -V`: {text:?}"
            )),
        }
    }

    fn start_slurm(&mut self) -> Result<()> {
        let mut ctld = self.series.command(&self.programs.slurmctld, None);
        ctld.env_clear()
            .env("PATH", CLEAN_PATH)
            .args(["-D", "-i", "-f"])
            .arg(&self.conf);
        let ctld = Daemon::spawn("slurmctld", ctld, &self.path.join("log/slurmctld.out"))?;
        self.daemons.push(ctld);
        let names: Vec<Option<String>> = if self.nodes.is_empty() {
            vec![None]
        } else {
            self.nodes.iter().cloned().map(Some).collect()
        };
        for name in names {
            let mut slurmd = self.series.command(&self.programs.slurmd, None);
            slurmd.env_clear().env("PATH", CLEAN_PATH).arg("-D");
            let label = match &name {
                Some(n) => {
                    slurmd.args(["-N", n]);
                    format!("slurmd-{n}")
                }
                None => "slurmd".to_owned(),
            };
            match &self.configless {
                // Nothing of the controller's files: the address and munge socket only.
                Some((port, socket)) => {
                    slurmd
                        .arg("--conf-server")
                        .arg(format!("127.0.0.1:{port}"))
                        .arg("--authinfo")
                        .arg(format!("socket={}", socket.display()));
                }
                None => {
                    slurmd.arg("-f").arg(&self.conf);
                }
            }
            let out = self.path.join(format!("log/{label}.out"));
            let slurmd = Daemon::spawn(&label, slurmd, &out)?;
            self.daemons.push(slurmd);
        }
        self.wait_idle(IDLE_TIMEOUT)
    }

    /// Poll `cond` every 50 ms until it is true, fails, or `limit` passes.
    fn wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        mut cond: impl FnMut(&mut Self) -> Result<bool>,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if cond(self)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(harness_err!(
                    "timed out after {limit:?} waiting for {what}{}",
                    self.log_tails()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// An error (with the logs) if any daemon has exited.
    fn check_daemons(&mut self) -> Result<()> {
        let dead: Vec<String> = self
            .daemons
            .iter_mut()
            .filter_map(|d| (!d.is_running()).then(|| d.name().to_owned()))
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(harness_err!(
                "{} exited unexpectedly{}",
                dead.join(", "),
                self.log_tails()
            ))
        }
    }

    /// Wait until the node shows `idle` (after start, or after `scontrol ... resume`).
    pub fn wait_idle(&mut self, limit: Duration) -> Result<()> {
        self.wait_for("the node to become idle", limit, |c| {
            c.check_daemons()?;
            // The cluster's own nodes only (a row per node and partition): other node
            // records (`slurm_conf_line`) may have no slurmd.
            let ours = c.nodes().join(",");
            let out = c.client(
                &["sinfo", "-h", "-N", "-n", &ours, "-o", "%T"],
                &ClientOptions::bounded(5),
            )?;
            Ok(out.success()
                && !out.stdout.trim().is_empty()
                && out.stdout.lines().all(|l| l.trim() == "idle"))
        })
    }

    /// The last lines of every daemon log, for error messages.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        for name in [
            "munged.log",
            "munged.out",
            "slurmctld.log",
            "slurmctld.out",
            "slurmd.log",
            "slurmd.out",
        ] {
            let Ok(text) = fs::read_to_string(self.path.join("log").join(name)) else {
                continue;
            };
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            if !tail.is_empty() {
                s.push_str(&format!(
                    "\n--- {name} (last lines) ---\n{}",
                    tail.join("\n")
                ));
            }
        }
        s
    }

    /// The cluster's directory (slurm.conf, logs, dev/, sysfs/, work/, jobs/).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// Path of slurm.conf (what clients need as SLURM_CONF).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The Slurm series this cluster runs (`22.05`, `24.11`, `26.05`).
    pub fn series(&self) -> &str {
        &self.series.name
    }

    /// A node's configless cache (`SlurmdSpoolDir/conf-cache`): where a configless
    /// slurmd keeps what it fetched from slurmctld. `None` unless built `configless`.
    pub fn conf_cache(&self, node: &str) -> Option<PathBuf> {
        // slurmd makes the cache before it knows its own name unless `-N` gave it: the
        // `%n` of `SlurmdSpoolDir=.../spool/%n` is then empty (`spool//conf-cache`,
        // measured on 25.11; its /run/slurm/conf link says so too).
        let node = if self.nodes.is_empty() { "" } else { node };
        self.configless
            .as_ref()
            .map(|_| self.path.join("spool").join(node).join("conf-cache"))
    }

    /// The prefix a source-built series runs from (`/opt/slurm`); `None` otherwise.
    pub fn series_install(&self) -> Option<&Path> {
        self.series.install.as_deref()
    }

    /// The Debian root this series' daemons run from; `None` for the machine's own.
    pub fn series_root(&self) -> Option<&Path> {
        self.series.root.as_ref().map(|r| r.dir())
    }

    /// The running Slurm's (major, minor, patch), from `slurmd -V`.
    pub fn slurm_version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// True when the running Slurm is `major.minor` or newer.
    pub fn slurm_at_least(&self, major: u32, minor: u32) -> bool {
        (self.version.0, self.version.1) >= (major, minor)
    }

    /// The node's name (this machine's short hostname).
    /// Every node's name (one entry, [`Cluster::node`], unless built with `nodes`).
    pub fn nodes(&self) -> Vec<String> {
        if self.nodes.is_empty() {
            vec![self.node.clone()]
        } else {
            self.nodes.clone()
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// gres.conf's GPU lines.
    pub fn gres_layout(&self) -> &[GresLine] {
        &self.gres
    }

    /// The fake devices gres.conf gives this node (the set, not Slurm's numbering).
    pub fn gres_minors(&self) -> std::collections::BTreeSet<u32> {
        self.gres
            .iter()
            .filter(|l| l.applies())
            .flat_map(|l| l.minors.iter().copied())
            .collect()
    }

    /// The fixture tree passed to the plugin as `sysfs_root=`.
    pub fn sysfs_root(&self) -> Option<&Path> {
        self.sysfs_root.as_deref()
    }

    /// The plugin copy this cluster loads.
    pub fn plugin_path(&self) -> Option<&Path> {
        self.plugin_path.as_deref()
    }

    /// PIDs of munged, slurmctld and slurmd, in start order.
    pub fn daemon_pids(&self) -> Vec<(String, u32)> {
        self.daemons
            .iter()
            .map(|d| (d.name().to_owned(), d.pid()))
            .collect()
    }

    /// True while munged, slurmctld and slurmd all run.
    pub fn daemons_alive(&mut self) -> bool {
        self.daemons.iter_mut().all(Daemon::is_running)
    }

    /// The text of a daemon's log (`slurmd.log`, `slurmctld.log`, `munged.log`).
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.path.join("log").join(name)).unwrap_or_default()
    }

    /// Rewrite plugstack.conf with (`true`) or without (`false`) the plugin line.
    /// srun and slurmstepd read it for every step, so the next step sees the change.
    pub fn write_plugstack(&self, with_plugin: bool) -> Result<()> {
        if with_plugin {
            self.write_plugstack_with(&[])
        } else {
            write(&self.plugstack, "# no plugins\n")
        }
    }

    /// A plugstack.conf of `plugin` alone, no arguments (bench-launch's control arm);
    /// takes effect for the next step.
    pub fn write_plugstack_of(&self, plugin: &Path) -> Result<()> {
        write(&self.plugstack, &conf::plugstack_line(plugin, &[]))
    }

    /// The plugin line with `extra` arguments after the cluster's own (e.g.
    /// `test_panic=task_init`); takes effect for the next step.
    pub fn write_plugstack_with(&self, extra: &[(&str, &str)]) -> Result<()> {
        let plugin = self
            .plugin_path
            .as_ref()
            .ok_or_else(|| harness_err!("this cluster was built without the plugin"))?;
        let mut args = self.plugin_args.clone();
        args.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        write(&self.plugstack, &conf::plugstack_line(plugin, &args))
    }

    /// A slurm.conf for clients only whose plugstack.conf is the cluster's clean plugin
    /// line (no `extra`), for a plugstack broken only on the node: srun and sbatch read
    /// PlugStackConfig through their own SLURM_CONF, slurmstepd through slurmd's. Pass it
    /// as `ClientOptions::env("SLURM_CONF", ..)`.
    pub fn client_conf_with_clean_plugstack(&self) -> Result<PathBuf> {
        let plugin = self
            .plugin_path
            .as_ref()
            .ok_or_else(|| harness_err!("this cluster was built without the plugin"))?;
        let plugstack = self.path.join("client-plugstack.conf");
        write(&plugstack, &conf::plugstack_line(plugin, &self.plugin_args))?;
        let text =
            fs::read_to_string(&self.conf).context(|| format!("read {}", self.conf.display()))?;
        let text: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("PlugStackConfig=") {
                    format!("PlugStackConfig={}", plugstack.display())
                } else {
                    l.to_owned()
                }
            })
            .collect();
        let client = self.path.join("client.conf");
        write(&client, &(text.join("\n") + "\n"))?;
        Ok(client)
    }

    /// The node's `State=` as `scontrol show node` prints it (`IDLE+DRAIN`), and its
    /// reason ([`Self::node_reason`]).
    pub fn node_state(&self) -> Result<(String, String)> {
        let out = self.client(
            &["scontrol", "-o", "show", "node", &self.node],
            &ClientOptions::bounded(10),
        )?;
        if !out.success() {
            return Err(harness_err!("scontrol show node failed: {out}"));
        }
        let state = out
            .stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or_default()
            .to_owned();
        Ok((state, self.node_reason()?))
    }

    /// The node's reason as slurmctld stores it, whole: sinfo's `%E` is unpadded and
    /// verbatim, where `scontrol -o show node` prints `Reason=TEXT [user@time]` with no
    /// quoting, so a reason holding `key=value` words (the suite's own, `gpu=...`) cannot
    /// be cut out of it reliably. Empty for none.
    pub fn node_reason(&self) -> Result<String> {
        self.node_reason_of(&self.node)
    }

    /// [`Self::node_reason`] of any of the cluster's nodes (see [`ClusterBuilder::nodes`]).
    pub fn node_reason_of(&self, node: &str) -> Result<String> {
        let out = self.client(
            &["sinfo", "-h", "-N", "-n", node, "-o", "%E"],
            &ClientOptions::bounded(10),
        )?;
        if !out.success() {
            return Err(harness_err!("sinfo failed: {out}"));
        }
        // One row per partition the node is in; they agree.
        let reason = out.stdout.lines().next().unwrap_or_default().trim();
        Ok(if reason == "none" {
            String::new()
        } else {
            reason.to_owned()
        })
    }

    /// The node as slurmctld knows it.
    pub fn shape(&self) -> &NodeShape {
        &self.shape
    }

    /// srun arguments for `tasks` tasks sharing the whole node: every CPU (so every
    /// NUMA node's cores are in the step) and every GPU. `-O` lets more tasks than CPUs
    /// run on the 2-CPU test machine; `-c` makes the allocation the whole node.
    pub fn whole_node(&self, tasks: u32) -> Vec<String> {
        let mut v = vec![
            "-O".to_owned(),
            format!("-n{tasks}"),
            format!("-c{}", self.shape.cpus()),
        ];
        let gpus = conf::gres_count(&self.gres);
        if gpus > 0 {
            v.push(format!("--gres=gpu:{gpus}"));
        }
        v
    }

    /// The job-level request for a whole-node job: one task holding every CPU and GPU.
    /// Valid on every series, unlike letting an overcommitting step size its own job
    /// (see [`Self::in_allocation`]); sbatch of a script running [`Self::whole_node`]
    /// steps uses this.
    pub fn whole_node_allocation(&self) -> Vec<String> {
        let mut v = vec!["-n1".to_owned(), format!("-c{}", self.shape.cpus())];
        if self.gpus > 0 {
            v.push(format!("--gres=gpu:{}", self.gpus));
        }
        v
    }

    /// `srun -O ...` (more tasks than CPUs) as a step inside its own job: `salloc -Q -n1
    /// -cC [--gres=gpu:G] srun ...`, with C and G taken from the step. An srun that
    /// creates its own job asks for tasks x CPUs-per-task; 22.05 granted that on a
    /// 2-CPU node under -O, 24.11 and later keep it pending forever ("Requested node
    /// configuration is not available"), while an overcommitting step inside a
    /// one-task allocation runs on every series (measured on 22.05, 24.11, 26.05).
    /// Other commands are returned unchanged.
    pub fn in_allocation(&self, argv: &[&str]) -> Vec<String> {
        let owned = || argv.iter().map(|a| (*a).to_owned()).collect();
        if argv.first() != Some(&"srun") || !argv.contains(&"-O") {
            return owned();
        }
        let cpus = argv
            .iter()
            .find_map(|a| a.strip_prefix("-c").filter(|c| !c.is_empty()))
            .unwrap_or("1");
        let mut v = vec![
            "salloc".to_owned(),
            "-Q".to_owned(),
            "-n1".to_owned(),
            format!("-c{cpus}"),
        ];
        if let Some(gres) = argv.iter().find(|a| a.starts_with("--gres=")) {
            v.push((*gres).to_owned());
        } else if let Some(per_task) = argv
            .iter()
            .find_map(|a| a.strip_prefix("--gpus-per-task="))
            .and_then(|n| n.parse::<u32>().ok())
        {
            // The one-task allocation must hold every task's GPUs: per task x tasks.
            let tasks = argv
                .iter()
                .find_map(|a| a.strip_prefix("-n").and_then(|n| n.parse::<u32>().ok()))
                .unwrap_or(1);
            v.push(format!("--gres=gpu:{}", per_task * tasks));
        }
        v.extend(argv.iter().map(|a| (*a).to_owned()));
        v
    }

    /// A client command (`srun`, `sbatch`, `scontrol`, ...) bounded by `timeout`, with a
    /// clean environment plus SLURM_CONF, run from the shared `work/` dir.
    pub fn command(&self, argv: &[&str], opts: &ClientOptions) -> Result<Command> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| harness_err!("empty client command"))?;
        let secs = opts.timeout.as_secs().max(1).to_string();
        let work = self.path.join("work");
        let mut cmd;
        if let Some(user) = &opts.user {
            // runuser first, so `timeout` runs as the user and can signal srun.
            cmd = self.series.command(&self.programs.runuser, Some(&work));
            cmd.args(["-u", user, "--"]).arg(&self.programs.timeout);
        } else {
            cmd = self.series.command(&self.programs.timeout, Some(&work));
        }
        cmd.args(["-k", "5", &secs])
            .arg(program)
            .args(args)
            .env_clear()
            // A user's login PATH (a source-built Slurm's bin first); the daemons keep
            // CLEAN_PATH, as systemd starts them without /opt/slurm on PATH.
            .env("PATH", self.series.path_env(CLEAN_PATH))
            .env("SLURM_CONF", &self.conf);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        Ok(cmd)
    }

    /// Run a client command and collect its output. An overcommitting srun runs inside
    /// a one-task allocation ([`Self::in_allocation`]).
    pub fn client(&self, argv: &[&str], opts: &ClientOptions) -> Result<StepOutput> {
        let wrapped = self.in_allocation(argv);
        let argv: Vec<&str> = wrapped.iter().map(String::as_str).collect();
        let argv = argv.as_slice();
        let mut cmd = self.command(argv, opts)?;
        let out = cmd.output().context(|| format!("run {}", argv.join(" ")))?;
        let mut command = String::new();
        if let Some(u) = &opts.user {
            command.push_str(&format!("(as {u}) "));
        }
        for (k, v) in &opts.env {
            command.push_str(&format!("{k}={v} "));
        }
        command.push_str(&argv.join(" "));
        Ok(StepOutput {
            command,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// `srun ARGS` as root.
    pub fn srun(&self, args: &[&str]) -> Result<StepOutput> {
        self.srun_with(args, &ClientOptions::default())
    }

    pub fn srun_with(&self, args: &[&str], opts: &ClientOptions) -> Result<StepOutput> {
        let mut argv = vec!["srun"];
        argv.extend_from_slice(args);
        self.client(&argv, opts)
    }

    /// `srun -l ARGS PROBE`: every task reports its mask, policy and env.
    pub fn probe(&self, args: &[&str], opts: &ClientOptions) -> Result<StepOutput> {
        let probe = self.probe_script();
        let probe = probe.display().to_string();
        let mut argv = vec!["srun", "-l"];
        argv.extend_from_slice(args);
        argv.push(&probe);
        self.client(&argv, opts)
    }

    /// The probe as an executable script (for batch scripts: `srun -l ... PROBE_PATH`).
    pub fn probe_script(&self) -> PathBuf {
        self.path.join("lib/probe.sh")
    }

    /// Wait until job `id` is RUNNING, polling squeue; bounded by the options' timeout
    /// (the same bound as any client), not by a guess of how fast a slow machine starts a
    /// job. A job that ends first, or a timeout, is an error with the daemons' log tails.
    pub fn wait_running(&self, id: &str, opts: &ClientOptions) -> Result<()> {
        let deadline = Instant::now() + opts.timeout;
        loop {
            let q = self.client(
                &["squeue", "-h", "-j", id, "-o", "%T"],
                &ClientOptions::bounded(10),
            )?;
            let state = q.stdout.trim().to_owned();
            if state == "RUNNING" {
                return Ok(());
            }
            if q.success() && (state.is_empty() || is_terminal(&state)) {
                return Err(harness_err!(
                    "job {id} ended before it ran (state {state:?}){}",
                    self.log_tails()
                ));
            }
            if Instant::now() >= deadline {
                return Err(harness_err!(
                    "job {id} was not running within {:?} (state {state:?}){}",
                    opts.timeout,
                    self.log_tails()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Submit `script` with `sbatch ARGS`, wait for the job to end (bounded by the
    /// options' timeout) and return its state, exit code and output.
    pub fn sbatch(&self, script: &str, args: &[&str], opts: &ClientOptions) -> Result<BatchJob> {
        let jobs = self.path.join("jobs");
        let n = fs::read_dir(&jobs).map(|d| d.count()).unwrap_or(0);
        let script_path = jobs.join(format!("script-{n}.sh"));
        write(&script_path, script)?;
        set_mode(&script_path, 0o755)?;
        let output = jobs.join("job-%j.out");
        let error = jobs.join("job-%j.err");
        let (o, e, s) = (
            format!("--output={}", output.display()),
            format!("--error={}", error.display()),
            script_path.display().to_string(),
        );
        let mut argv = vec!["sbatch", "--parsable", o.as_str(), e.as_str()];
        argv.extend_from_slice(args);
        argv.push(&s);
        let submitted = self.client(&argv, opts)?;
        if !submitted.success() {
            return Err(harness_err!("sbatch refused the job: {submitted}"));
        }
        let id: u32 = submitted
            .stdout
            .trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| harness_err!("sbatch printed no job id: {submitted}"))?;
        let deadline = Instant::now() + opts.timeout;
        let (state, exit_code) = loop {
            let id_s = id.to_string();
            let show = self.client(
                &["scontrol", "-o", "show", "job", &id_s],
                &ClientOptions::bounded(10),
            )?;
            let field = |key: &str| {
                show.stdout
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            let state = field("JobState").unwrap_or_default();
            if is_terminal(&state) {
                break (state, field("ExitCode").unwrap_or_default());
            }
            if Instant::now() >= deadline {
                let _ = self.client(&["scancel", &id_s], &ClientOptions::bounded(10));
                return Err(harness_err!(
                    "batch job {id} did not finish within {:?} (state {state}){}",
                    opts.timeout,
                    self.log_tails()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let read = |p: &Path| {
            let path = PathBuf::from(p.display().to_string().replace("%j", &id.to_string()));
            fs::read_to_string(path).unwrap_or_default()
        };
        Ok(BatchJob {
            id,
            state,
            exit_code,
            stdout: read(&output),
            stderr: read(&error),
        })
    }

    /// Cancel whatever still runs (a failed test's leftovers), bounded.
    fn cancel_all(&self) {
        let Ok(q) = self.client(&["squeue", "-h", "-o", "%i"], &ClientOptions::bounded(5)) else {
            return;
        };
        if q.success() && !q.stdout.trim().is_empty() {
            let _ = self.client(
                &["scancel", "--full", "-u", "root"],
                &ClientOptions::bounded(5),
            );
            let _ = self.client(
                &["scancel", "--full", "-u", "nobody"],
                &ClientOptions::bounded(5),
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.cancel_all();
        if std::thread::panicking() {
            eprintln!(
                "gpu-affinity-tests: cluster in {} at failure:{}",
                self.path.display(),
                self.log_tails()
            );
        }
        // slurmd before slurmctld (else slurmd keeps retrying and needs SIGKILL), munged last.
        while let Some(mut d) = self.daemons.pop() {
            d.stop(STOP_GRACE);
        }
        if let Some(base) = self.container_base.take() {
            let _ = fs::remove_dir_all(base);
        }
        if std::env::var_os(KEEP_ENV).is_some()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!("gpu-affinity-tests: kept cluster dir {}", kept.display());
        }
    }
}

/// How a client command runs.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Run as this user (via `runuser -u`), not root.
    pub user: Option<String>,
    /// Extra environment on top of the clean one.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            user: None,
            env: Vec::new(),
            timeout: CLIENT_TIMEOUT,
        }
    }
}

impl ClientOptions {
    pub fn bounded(secs: u64) -> Self {
        Self {
            timeout: Duration::from_secs(secs),
            ..Self::default()
        }
    }

    pub fn as_user(user: &str) -> Self {
        Self {
            user: Some(user.to_owned()),
            ..Self::default()
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// A finished batch job.
#[derive(Debug, Clone)]
pub struct BatchJob {
    pub id: u32,
    /// Final JobState (COMPLETED, FAILED, ...).
    pub state: String,
    /// Slurm's `ExitCode=code:signal`.
    pub exit_code: String,
    pub stdout: String,
    pub stderr: String,
}

impl BatchJob {
    pub fn completed(&self) -> bool {
        self.state == "COMPLETED" && self.exit_code == "0:0"
    }

    /// Parse the job's output as probe lines (the script ran `srun -l ... sh -c PROBE`).
    pub fn tasks(&self) -> Result<std::collections::BTreeMap<u32, crate::report::TaskReport>> {
        crate::report::parse_probe(&self.stdout)
    }
}

impl std::fmt::Display for BatchJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} {} exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.id,
            self.state,
            self.exit_code,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "PREEMPTED"
    )
}

fn short_hostname() -> Result<String> {
    let full = fs::read_to_string("/proc/sys/kernel/hostname")
        .context(|| "read /proc/sys/kernel/hostname".to_owned())?;
    let short = full.trim().split('.').next().unwrap_or_default().to_owned();
    if short.is_empty() {
        Err(harness_err!("this machine has an empty hostname"))
    } else {
        Ok(short)
    }
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    fs::create_dir_all(path).context(|| format!("create {}", path.display()))?;
    set_mode(path, mode)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .context(|| format!("chmod {mode:o} {}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| HarnessError(format!("write {}: {e}", path.display())))
}
