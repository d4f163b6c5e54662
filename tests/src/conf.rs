//! The text of the cluster's configuration files.
//!
//! Kept apart from the process handling so the exact lines a test cluster runs with are
//! in one place and easy to compare with the facts file (../shared/slurm-test-cluster.md).

use std::fmt::Write as _;
use std::path::Path;

/// Which task plugin slurmd runs next to the SPANK plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskPlugin {
    /// `task/none`: only gpu-affinity binds tasks. Required for an emulated node larger
    /// than the machine.
    #[default]
    None,
    /// `task/affinity`: Slurm binds too (to the real CPUs); gpu-affinity must still win.
    Affinity,
    /// `task/cgroup,task/affinity` with `proctrack/cgroup` and `ConstrainDevices=yes`:
    /// each step sees only its own fake GPUs.
    CgroupDevices,
}

/// The node as slurmd reports it to slurmctld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeShape {
    /// What `slurmd -C` says about this machine.
    Real {
        sockets: u32,
        cores_per_socket: u32,
        threads_per_core: u32,
    },
    /// A larger node than the machine (`SlurmdParameters=config_overrides`); only works
    /// with `task/none`.
    Emulated {
        sockets: u32,
        cores_per_socket: u32,
        threads_per_core: u32,
    },
}

impl NodeShape {
    pub fn cpus(&self) -> u32 {
        match *self {
            NodeShape::Real {
                sockets,
                cores_per_socket,
                threads_per_core,
            }
            | NodeShape::Emulated {
                sockets,
                cores_per_socket,
                threads_per_core,
            } => sockets * cores_per_socket * threads_per_core,
        }
    }

    fn line(&self) -> String {
        let (NodeShape::Real {
            sockets,
            cores_per_socket,
            threads_per_core,
        }
        | NodeShape::Emulated {
            sockets,
            cores_per_socket,
            threads_per_core,
        }) = *self;
        format!(
            "CPUs={} Boards=1 SocketsPerBoard={sockets} CoresPerSocket={cores_per_socket} \
             ThreadsPerCore={threads_per_core}",
            self.cpus()
        )
    }

    /// Parse the node line `slurmd -C` prints.
    pub fn from_slurmd_c(text: &str) -> Option<NodeShape> {
        let field = |key: &str| -> Option<u32> {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        };
        Some(NodeShape::Real {
            sockets: field("SocketsPerBoard")? * field("Boards").unwrap_or(1),
            cores_per_socket: field("CoresPerSocket")?,
            threads_per_core: field("ThreadsPerCore")?,
        })
    }
}

/// Everything slurm.conf needs to know.
pub struct SlurmConf<'a> {
    pub cluster_name: &'a str,
    pub node: &'a str,
    pub ctld_port: u16,
    pub slurmd_port: u16,
    pub dir: &'a Path,
    pub munge_socket: &'a Path,
    pub plugstack: &'a Path,
    pub shape: &'a NodeShape,
    pub task_plugin: TaskPlugin,
    pub gpus: u32,
    /// `GresTypes=gpu` (without it Slurm leaves a user's own SLURM_STEP_GPUS alone).
    pub gres_types: bool,
    /// SlurmdDebug level; `verbose` makes the plugin's per-step summary visible in slurmd.log.
    pub slurmd_debug: &'a str,
    /// `SlurmdParameters=contain_spank` (24.05+) with a tmpfs job container, for a
    /// Slurm of this (major, minor); `None` for no container.
    pub contain_spank: Option<(u32, u32)>,
    /// Several nodes (`slurmd -N NAME`), each with its port; empty: `node` alone.
    pub nodes: &'a [String],
    pub node_ports: &'a [u16],
    /// This machine's short hostname (`NodeHostname=` of every node of several).
    pub host: &'a str,
    /// Extra lines, before the node lines.
    pub extra_lines: &'a [String],
    /// Whole lines appended at the end (`Prolog=...`, `HealthCheckProgram=...`, more
    /// nodes and partitions).
    pub extra: &'a [String],
    /// slurmctld serves the config (`enable_configless`); no `PlugStackConfig=`, so the
    /// plugstack.conf beside slurm.conf is served with it.
    pub configless: bool,
}

impl SlurmConf<'_> {
    pub fn render(&self) -> String {
        let d = self.dir.display();
        let (proctrack, task) = match self.task_plugin {
            TaskPlugin::None => ("proctrack/linuxproc", "task/none"),
            TaskPlugin::Affinity => ("proctrack/linuxproc", "task/affinity"),
            TaskPlugin::CgroupDevices => ("proctrack/cgroup", "task/cgroup,task/affinity"),
        };
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line("# written by gpu-affinity-tests; throwaway one-node cluster".into());
        line(format!("ClusterName={}", self.cluster_name));
        // The controller runs on this machine whatever the nodes are called.
        let ctld_host = if self.nodes.is_empty() {
            self.node
        } else {
            self.host
        };
        line(format!("SlurmctldHost={ctld_host}(127.0.0.1)"));
        line(format!("SlurmctldPort={}", self.ctld_port));
        line(format!("SlurmdPort={}", self.slurmd_port));
        line("SlurmUser=root".into());
        line("SlurmdUser=root".into());
        line("AuthType=auth/munge".into());
        line("CredType=cred/munge".into());
        line(format!("AuthInfo=socket={}", self.munge_socket.display()));
        line(format!("StateSaveLocation={d}/state"));
        line(format!("SlurmdSpoolDir={d}/spool/%n"));
        line(format!("SlurmctldPidFile={d}/run/slurmctld.pid"));
        line(format!("SlurmdPidFile={d}/run/slurmd-%n.pid"));
        line(format!("SlurmctldLogFile={d}/log/slurmctld.log"));
        if self.nodes.is_empty() {
            line(format!("SlurmdLogFile={d}/log/slurmd.log"));
        } else {
            line(format!("SlurmdLogFile={d}/log/slurmd-%n.log"));
        }
        line("SlurmctldDebug=info".into());
        line(format!("SlurmdDebug={}", self.slurmd_debug));
        line(format!("ProctrackType={proctrack}"));
        line(format!("TaskPlugin={task}"));
        line("SelectType=select/cons_tres".into());
        line("SelectTypeParameters=CR_Core".into());
        if self.gres_types {
            line("GresTypes=gpu".into());
        }
        line("AccountingStorageType=accounting_storage/none".into());
        line("JobAcctGatherType=jobacct_gather/none".into());
        line("JobCompType=jobcomp/none".into());
        line("MpiDefault=none".into());
        line("MailProg=/bin/true".into());
        line("ReturnToService=2".into());
        // Short so a failed test's leftovers do not keep the node busy for long.
        line("KillWait=2".into());
        line("MinJobAge=2".into());
        if self.configless {
            line("SlurmctldParameters=enable_configless".into());
        } else {
            line(format!("PlugStackConfig={}", self.plugstack.display()));
        }
        let mut slurmd_params = Vec::new();
        if matches!(self.shape, NodeShape::Emulated { .. }) {
            slurmd_params.push("config_overrides");
        }
        if let Some(version) = self.contain_spank {
            // user_init, task_post_fork and task_exit then run inside the job's
            // namespace. The tmpfs container needs PrologFlags=Contain; 25.11 renamed
            // JobContainerType to NamespaceType (the old name is deprecated).
            slurmd_params.push("contain_spank");
            line("PrologFlags=Contain".into());
            if version >= (25, 11) {
                line("NamespaceType=namespace/tmpfs".into());
            } else {
                line("JobContainerType=job_container/tmpfs".into());
            }
        }
        if !slurmd_params.is_empty() {
            line(format!("SlurmdParameters={}", slurmd_params.join(",")));
        }
        let gres = if self.gpus > 0 {
            format!(" Gres=gpu:{}", self.gpus)
        } else {
            String::new()
        };
        for l in self.extra_lines {
            line(l.clone());
        }
        if self.nodes.is_empty() {
            line(format!(
                "NodeName={} NodeAddr=127.0.0.1 {}{gres} State=UNKNOWN",
                self.node,
                self.shape.line()
            ));
        } else {
            // All on this machine: same hostname and address, one port each.
            for (n, port) in self.nodes.iter().zip(self.node_ports) {
                line(format!(
                    "NodeName={n} NodeHostname={} NodeAddr=127.0.0.1 Port={port} {}{gres} State=UNKNOWN",
                    self.host,
                    self.shape.line()
                ));
            }
        }
        let partition = if self.nodes.is_empty() {
            self.node.to_owned()
        } else {
            self.nodes.join(",")
        };
        line(format!(
            "PartitionName=test Nodes={partition} Default=YES MaxTime=INFINITE State=UP"
        ));
        for l in self.extra {
            line(l.clone());
        }
        s
    }
}

/// Which node a gres.conf line is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GresNode {
    /// `NodeName=<this node> Name=gpu ...`.
    This,
    /// `NodeName=<other> Name=gpu ...`: a line slurmd must skip.
    Other(String),
    /// `Name=gpu ...` without NodeName: every node.
    Every,
}

/// One `Name=gpu File=...` line of gres.conf over the fake devices `dev/nvidiaN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresLine {
    pub node: GresNode,
    /// The minors the line lists, in its order; a rising run of several is written as a
    /// range (`nvidia[4-7]`), anything else as a bracket list or one file.
    pub minors: Vec<u32>,
}

impl GresLine {
    pub fn this_node(minors: &[u32]) -> Self {
        Self {
            node: GresNode::This,
            minors: minors.to_vec(),
        }
    }

    pub fn every_node(minors: &[u32]) -> Self {
        Self {
            node: GresNode::Every,
            minors: minors.to_vec(),
        }
    }

    pub fn other_node(node: &str, minors: &[u32]) -> Self {
        Self {
            node: GresNode::Other(node.to_owned()),
            minors: minors.to_vec(),
        }
    }

    /// Whether slurmd on `node` reads this line.
    pub fn applies(&self) -> bool {
        !matches!(self.node, GresNode::Other(_))
    }

    fn files(&self, dev_dir: &Path) -> String {
        let d = dev_dir.display();
        let m = &self.minors;
        let rising = m.windows(2).all(|w| w[1] == w[0] + 1);
        match m.as_slice() {
            [one] => format!("{d}/nvidia{one}"),
            [first, .., last] if rising => format!("{d}/nvidia[{first}-{last}]"),
            _ => format!(
                "{d}/nvidia[{}]",
                m.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// The default layout: one line for this node listing `dev/nvidia0..N-1` in order.
pub fn default_gres_layout(gpus: u32) -> Vec<GresLine> {
    if gpus == 0 {
        Vec::new()
    } else {
        vec![GresLine::this_node(&(0..gpus).collect::<Vec<_>>())]
    }
}

/// The number of GPUs the lines give `node` (slurm.conf's `Gres=gpu:N` must agree).
pub fn gres_count(lines: &[GresLine]) -> u32 {
    let n: usize = lines
        .iter()
        .filter(|l| l.applies())
        .map(|l| l.minors.len())
        .sum();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// gres.conf with `lines` over the fake GPU device nodes in `dev_dir`.
pub fn gres_conf(node: &str, dev_dir: &Path, lines: &[GresLine]) -> String {
    let mut s = String::new();
    for l in lines.iter().filter(|l| !l.minors.is_empty()) {
        let prefix = match &l.node {
            GresNode::This => format!("NodeName={node} "),
            GresNode::Other(other) => format!("NodeName={other} "),
            GresNode::Every => String::new(),
        };
        s.push_str(&format!("{prefix}Name=gpu File={}\n", l.files(dev_dir)));
    }
    s
}

/// job_container.conf for the tmpfs container: a private /dev/shm per job under
/// `base`. /tmp stays shared (`Dirs=`), since the cluster dir, its probe and the sysfs
/// fixture live there and the tasks must reach the probe.
pub fn job_container_conf(base: &Path) -> String {
    format!(
        "AutoBasePath=true\nBasePath={}\nDirs=/dev/shm\n",
        base.display()
    )
}

/// cgroup.conf (read next to slurm.conf); only the cgroup plugins use it.
pub fn cgroup_conf(task_plugin: TaskPlugin) -> String {
    let mut s = String::from("CgroupPlugin=autodetect\nCgroupMountpoint=/sys/fs/cgroup\n");
    if task_plugin == TaskPlugin::CgroupDevices {
        s.push_str("ConstrainDevices=yes\n");
    }
    s
}

/// One plugstack.conf line: `required PLUGIN key=value ...`.
pub fn plugstack_line(plugin: &Path, args: &[(String, String)]) -> String {
    let mut s = format!("required {}", plugin.display());
    for (k, v) in args {
        let _ = write!(s, " {k}={v}");
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_node_line_of_slurmd_c() {
        let text = "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 \
                    RealMemory=24105\nUpTime=0-00:06:56\n";
        assert_eq!(
            NodeShape::from_slurmd_c(text),
            Some(NodeShape::Real {
                sockets: 1,
                cores_per_socket: 2,
                threads_per_core: 1
            })
        );
        assert_eq!(NodeShape::from_slurmd_c("garbage"), None);
    }

    fn render(shape: NodeShape, task_plugin: TaskPlugin) -> String {
        SlurmConf {
            cluster_name: "t",
            node: "n1",
            ctld_port: 20000,
            slurmd_port: 20001,
            dir: Path::new("/tmp/c"),
            munge_socket: Path::new("/tmp/c/munge/munge.socket"),
            plugstack: Path::new("/tmp/c/plugstack.conf"),
            shape: &shape,
            task_plugin,
            gpus: 8,
            gres_types: true,
            slurmd_debug: "info",
            contain_spank: None,
            configless: false,
            nodes: &[],
            node_ports: &[],
            host: "h",
            extra_lines: &[],
            extra: &[],
        }
        .render()
    }

    #[test]
    fn an_emulated_node_uses_config_overrides() {
        let big = NodeShape::Emulated {
            sockets: 2,
            cores_per_socket: 48,
            threads_per_core: 2,
        };
        let text = render(big, TaskPlugin::None);
        assert!(
            text.contains("SlurmdParameters=config_overrides\n"),
            "{text}"
        );
        assert!(text.contains("CPUs=192 "), "{text}");
        assert!(text.contains("Gres=gpu:8 "), "{text}");
        assert!(text.contains("TaskPlugin=task/none\n"), "{text}");
        assert!(
            text.contains("AuthInfo=socket=/tmp/c/munge/munge.socket\n"),
            "{text}"
        );
    }

    #[test]
    fn cgroup_devices_turns_on_the_cgroup_plugins() {
        let real = NodeShape::Real {
            sockets: 1,
            cores_per_socket: 2,
            threads_per_core: 1,
        };
        let text = render(real, TaskPlugin::CgroupDevices);
        assert!(text.contains("ProctrackType=proctrack/cgroup\n"), "{text}");
        assert!(
            text.contains("TaskPlugin=task/cgroup,task/affinity\n"),
            "{text}"
        );
        assert!(!text.contains("config_overrides"), "{text}");
        assert!(cgroup_conf(TaskPlugin::CgroupDevices).contains("ConstrainDevices=yes"));
    }

    #[test]
    fn gres_conf_lists_the_fake_devices() {
        let d = Path::new("/d");
        assert_eq!(
            gres_conf("n1", d, &default_gres_layout(8)),
            "NodeName=n1 Name=gpu File=/d/nvidia[0-7]\n"
        );
        assert_eq!(
            gres_conf("n1", d, &default_gres_layout(1)),
            "NodeName=n1 Name=gpu File=/d/nvidia0\n"
        );
        assert_eq!(gres_conf("n1", d, &default_gres_layout(0)), "");
        let layout = [
            GresLine::every_node(&[5, 4]),
            GresLine::other_node("n9", &[0]),
            GresLine::this_node(&[6, 7]),
        ];
        assert_eq!(
            gres_conf("n1", d, &layout),
            "Name=gpu File=/d/nvidia[5,4]\nNodeName=n9 Name=gpu File=/d/nvidia0\n\
             NodeName=n1 Name=gpu File=/d/nvidia[6-7]\n"
        );
        assert_eq!(gres_count(&layout), 4);
    }
}
