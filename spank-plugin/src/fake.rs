//! Fakes of Slurm ([`FakeHost`]) and the kernel ([`FakeOs`]) for unit tests.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{Machine, PciLink};
use gpu_affinity::slurm::gres_conf::GresConf;
use gpu_affinity::slurm::topology::Topology;
use gpu_affinity::sources::sysfs::Detail;

use crate::host::{Context, Host, HostError, MemPolicy, OptionSpec, Os};

pub struct FakeHost {
    pub context: Context,
    pub job_id: u32,
    pub step_id: u32,
    /// S_JOB_NODEID.
    pub node_id: u32,
    /// S_JOB_NNODES.
    pub nodes: u32,
    pub uid: u32,
    pub local_task: Option<u32>,
    pub global_task: Option<u32>,
    pub local_tasks: u32,
    pub alloc_cores: Option<String>,
    pub env: RefCell<BTreeMap<String, String>>,
    pub process_env: BTreeMap<String, String>,
    pub registered: RefCell<Vec<OptionSpec>>,
}

impl FakeHost {
    pub fn new(context: Context) -> Self {
        FakeHost {
            context,
            job_id: 42,
            step_id: 0,
            node_id: 0,
            nodes: 1,
            uid: 1000,
            local_task: None,
            global_task: None,
            local_tasks: 1,
            alloc_cores: None,
            env: RefCell::new(BTreeMap::new()),
            process_env: BTreeMap::new(),
            registered: RefCell::new(Vec::new()),
        }
    }

    pub fn with_env(self, pairs: &[(&str, &str)]) -> Self {
        for (k, v) in pairs {
            self.env.borrow_mut().insert(k.to_string(), v.to_string());
        }
        self
    }

    /// The same host as task `local` (global rank `global`) in task_init.
    pub fn task(&self, local: u32, global: u32) -> FakeHost {
        FakeHost {
            context: self.context,
            job_id: self.job_id,
            step_id: self.step_id,
            node_id: self.node_id,
            nodes: self.nodes,
            uid: self.uid,
            local_task: Some(local),
            global_task: Some(global),
            local_tasks: self.local_tasks,
            alloc_cores: self.alloc_cores.clone(),
            env: RefCell::new(self.env.borrow().clone()),
            process_env: self.process_env.clone(),
            registered: RefCell::new(Vec::new()),
        }
    }

    pub fn var(&self, name: &str) -> Option<String> {
        self.env.borrow().get(name).cloned()
    }
}

fn not_avail(call: &'static str) -> HostError {
    HostError {
        call,
        reason: "Item not available from this callback".into(),
    }
}

impl Host for FakeHost {
    fn context(&self) -> Context {
        self.context
    }
    fn job_id(&self) -> Result<u32, HostError> {
        Ok(self.job_id)
    }
    fn step_id(&self) -> Result<u32, HostError> {
        Ok(self.step_id)
    }
    fn node_id(&self) -> Result<u32, HostError> {
        Ok(self.node_id)
    }
    fn step_node_count(&self) -> Result<u32, HostError> {
        Ok(self.nodes)
    }
    fn job_uid(&self) -> Result<u32, HostError> {
        Ok(self.uid)
    }
    fn local_task_id(&self) -> Result<u32, HostError> {
        self.local_task.ok_or_else(|| not_avail("S_TASK_ID"))
    }
    fn global_task_id(&self) -> Result<u32, HostError> {
        self.global_task
            .ok_or_else(|| not_avail("S_TASK_GLOBAL_ID"))
    }
    fn local_task_count(&self) -> Result<u32, HostError> {
        Ok(self.local_tasks)
    }
    fn step_alloc_cores(&self) -> Result<String, HostError> {
        self.alloc_cores
            .clone()
            .ok_or_else(|| not_avail("S_STEP_ALLOC_CORES"))
    }
    fn getenv(&self, name: &str) -> Result<Option<String>, HostError> {
        Ok(self.var(name))
    }
    fn setenv(&self, name: &str, value: &str) -> Result<(), HostError> {
        self.env
            .borrow_mut()
            .insert(name.to_string(), value.to_string());
        Ok(())
    }
    fn register_option(&self, option: &OptionSpec) -> Result<(), HostError> {
        self.registered.borrow_mut().push(*option);
        Ok(())
    }
    fn process_env(&self, name: &str) -> Option<String> {
        self.process_env.get(name).cloned()
    }
}

/// A kernel with a given set of CPUs (a cgroup cpuset) and NUMA nodes.
pub struct FakeOs {
    /// The node as a full read gives it; a placement read leaves out what the core's
    /// reader leaves out.
    pub machine: Result<Machine, String>,
    pub reads: RefCell<Vec<PathBuf>>,
    /// The detail each read asked for.
    pub details: RefCell<Vec<Detail>>,
    /// How many times the PCIe links were read afterwards.
    pub link_reads: Cell<u32>,
    /// CPUs a mask may hold (the cpuset); setaffinity keeps the intersection, like Linux.
    pub allowed_cpus: CpuSet,
    pub online_nodes: Vec<u32>,
    pub affinity: RefCell<CpuSet>,
    pub policy: RefCell<(MemPolicy, Vec<u32>)>,
    pub stderr: RefCell<Vec<String>>,
    pub policy_calls: Cell<u32>,
    /// gres.conf text at any path (`None`: no file), read as `node`.
    pub gres_conf: Option<String>,
    pub node: String,
    /// Topology files by path (text; parsed as the real reader does, by extension).
    pub topology_files: std::collections::HashMap<PathBuf, String>,
    /// cgroup.conf's ConstrainDevices.
    pub constrain_devices: bool,
    /// slurm.conf text at any path (`None`: no file).
    pub slurm_conf: Option<String>,
    /// The process's own arguments (srun's).
    pub args: Vec<String>,
}

impl FakeOs {
    pub fn new(machine: Result<Machine, String>, allowed_cpus: &str, online_nodes: &[u32]) -> Self {
        let allowed = CpuSet::parse_list(allowed_cpus).unwrap_or_default();
        FakeOs {
            machine,
            reads: RefCell::new(Vec::new()),
            details: RefCell::new(Vec::new()),
            link_reads: Cell::new(0),
            affinity: RefCell::new(allowed.clone()),
            allowed_cpus: allowed,
            online_nodes: online_nodes.to_vec(),
            policy: RefCell::new((MemPolicy::Default, Vec::new())),
            stderr: RefCell::new(Vec::new()),
            policy_calls: Cell::new(0),
            gres_conf: None,
            node: "n1".into(),
            topology_files: std::collections::HashMap::new(),
            slurm_conf: None,
            args: Vec::new(),
            constrain_devices: false,
        }
    }
}

impl Os for FakeOs {
    fn read_machine(&self, root: &Path, detail: Detail) -> Result<Machine, String> {
        self.reads.borrow_mut().push(root.to_path_buf());
        self.details.borrow_mut().push(detail);
        let mut machine = self.machine.clone()?;
        if detail == Detail::Placement {
            for d in &mut machine.pci {
                d.link = PciLink::default();
            }
            for p in machine.nics.iter_mut().flat_map(|n| &mut n.ports) {
                p.state = None;
                p.rate = None;
            }
        }
        Ok(machine)
    }
    fn read_pci_links(&self, _root: &Path, machine: &mut Machine) -> Result<(), String> {
        self.link_reads.set(self.link_reads.get() + 1);
        let full = self.machine.as_ref()?;
        for d in &mut machine.pci {
            if let Some(f) = full.pci_device(d.addr) {
                d.link = f.link.clone();
            }
        }
        Ok(())
    }
    fn online_numa_nodes(&self) -> Result<Vec<u32>, String> {
        Ok(self.online_nodes.clone())
    }
    fn set_cpu_affinity(&self, cpus: &CpuSet) -> Result<(), String> {
        let effective = cpus.intersection(&self.allowed_cpus);
        if effective.is_empty() {
            return Err("Invalid argument (EINVAL)".into());
        }
        *self.affinity.borrow_mut() = effective;
        Ok(())
    }
    fn cpu_affinity(&self) -> Result<CpuSet, String> {
        Ok(self.affinity.borrow().clone())
    }
    fn set_mempolicy(&self, policy: MemPolicy, nodes: &[u32]) -> Result<(), String> {
        self.policy_calls.set(self.policy_calls.get() + 1);
        if nodes.iter().any(|n| !self.online_nodes.contains(n)) {
            return Err("Invalid argument (EINVAL)".into());
        }
        *self.policy.borrow_mut() = (policy, nodes.to_vec());
        Ok(())
    }
    fn mempolicy(&self) -> Result<(MemPolicy, Vec<u32>), String> {
        Ok(self.policy.borrow().clone())
    }
    fn task_stderr(&self, line: &str) {
        self.stderr.borrow_mut().push(line.to_string());
    }
    fn read_gres_conf(&self, path: &Path, _owner: u32) -> Result<Option<GresConf>, String> {
        self.gres_conf
            .as_deref()
            .map(|t| {
                gpu_affinity::slurm::gres_conf::parse(t)
                    .map_err(|e| format!("gres.conf {}:{}", path.display(), e))
            })
            .transpose()
    }
    fn read_slurm_topology(
        &self,
        path: &Path,
        _owner: u32,
    ) -> Result<Option<Vec<Topology>>, String> {
        self.topology_files
            .get(path)
            .map(|text| gpu_affinity::slurm::read::parse_topology(path, text))
            .transpose()
    }
    fn constrain_devices(&self, _path: &Path, _owner: u32) -> Result<bool, String> {
        Ok(self.constrain_devices)
    }
    fn read_slurm_conf(
        &self,
        _path: &Path,
        _owner: u32,
    ) -> Result<Option<gpu_affinity::slurm::slurm_conf::SlurmConf>, String> {
        self.slurm_conf
            .as_deref()
            .map(gpu_affinity::slurm::slurm_conf::parse)
            .transpose()
    }
    fn own_args(&self) -> Vec<String> {
        self.args.clone()
    }
    fn slurmd_conf(&self) -> Option<PathBuf> {
        Some(PathBuf::from("/etc/slurm/slurm.conf"))
    }
    fn node_name(&self) -> Option<String> {
        Some(self.node.clone())
    }
    fn device_minor(&self, path: &str) -> Option<u32> {
        gpu_affinity::slurm::gpu_ids::minor_from_name(path)
    }
}
