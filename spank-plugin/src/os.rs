//! The live kernel behind [`Os`]: sched_setaffinity, set_mempolicy / get_mempolicy and
//! the topology under a sysfs root.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::NodeView;
use gpu_affinity::model::Machine;
use gpu_affinity::slurm::gres_conf::GresConf;
use gpu_affinity::slurm::slurm_conf::SlurmConf;
use gpu_affinity::slurm::topology::Topology;
use gpu_affinity::sources::sysfs::Detail;
use nix::unistd::Pid;

use crate::copies::Copies;
use crate::host::{MemPolicy, Os};
use crate::node_view::ViewError;

/// linux/mempolicy.h (the libc crate does not carry these).
const MPOL_DEFAULT: i32 = 0;
const MPOL_PREFERRED: i32 = 1;
const MPOL_BIND: i32 = 2;
/// Mode flags get_mempolicy may report alongside the mode.
const MPOL_MODE_FLAGS: i32 = (1 << 15) | (1 << 14) | (1 << 13);

/// Node mask size handed to the kernel: 1024 nodes is the largest MAX_NUMNODES distributions
/// build with. The kernel reads `maxnode - 1` bits, hence the +1.
const MASK_WORDS: usize = 16;
const MAXNODE: libc::c_ulong = (MASK_WORDS * 64 + 1) as libc::c_ulong;

/// The running kernel, for the calling thread (the task being set up).
pub struct LiveOs;

impl Os for LiveOs {
    fn read_gres_conf(&self, path: &Path, owner: u32) -> Result<Option<GresConf>, String> {
        gpu_affinity::slurm::read::read_gres_conf(path, owner).map_err(|e| e.to_string())
    }

    fn read_slurm_topology(
        &self,
        path: &Path,
        owner: u32,
    ) -> Result<Option<Vec<Topology>>, String> {
        gpu_affinity::slurm::read::read_topology(path, owner)
    }

    fn constrain_devices(&self, path: &Path, owner: u32) -> Result<bool, String> {
        gpu_affinity::slurm::read::read_constrain_devices(path, owner).map_err(|e| e.to_string())
    }

    fn read_slurm_conf(&self, path: &Path, owner: u32) -> Result<Option<SlurmConf>, String> {
        gpu_affinity::slurm::read::read_slurm_conf(path, owner)
    }

    fn own_args(&self) -> Vec<String> {
        use std::io::Read;
        // srun's command line: a few KiB; anything past 1 MiB is not read.
        let mut bytes = Vec::new();
        let read = std::fs::File::open("/proc/self/cmdline")
            .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes));
        if read.is_err() {
            return Vec::new();
        }
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    fn slurmd_conf(&self) -> Option<PathBuf> {
        std::env::var_os("SLURM_CONF").map(PathBuf::from)
    }

    fn node_name(&self) -> Option<String> {
        gpu_affinity::slurm::read::short_hostname()
    }

    fn device_minor(&self, path: &str) -> Option<u32> {
        gpu_affinity::slurm::read::device_minor(path)
    }

    fn read_machine(&self, root: &Path, detail: Detail) -> Result<Machine, String> {
        crate::sysfs_machine::read_machine(root, detail)
    }

    fn read_pci_links(&self, root: &Path, machine: &mut Machine) -> Result<(), String> {
        crate::sysfs_machine::read_pci_links(root, machine)
    }

    fn step_view(
        &self,
        root: &Path,
        profiles_dir: &Path,
        owner: u32,
        copies: &Copies,
    ) -> Result<NodeView, ViewError> {
        crate::node_view::step_view(root, profiles_dir, owner, copies)
    }

    /// Read once per process: user_init asks first (see `user_init::decide`), so the
    /// tasks slurmstepd forks afterwards inherit the answer instead of each reading sysfs
    /// again. The kernel's online nodes do not change while one step launches.
    fn online_numa_nodes(&self) -> Result<Vec<u32>, String> {
        static ONLINE: OnceLock<Result<Vec<u32>, String>> = OnceLock::new();
        ONLINE.get_or_init(read_online_numa_nodes).clone()
    }

    fn set_cpu_affinity(&self, cpus: &CpuSet) -> Result<(), String> {
        let mut set = nix::sched::CpuSet::new();
        for cpu in cpus.iter() {
            set.set(cpu as usize)
                .map_err(|_| format!("CPU {cpu} is beyond the kernel's CPU set size"))?;
        }
        nix::sched::sched_setaffinity(Pid::from_raw(0), &set)
            .map_err(|e| format!("sched_setaffinity({cpus}): {e}"))
    }

    fn cpu_affinity(&self) -> Result<CpuSet, String> {
        let set = nix::sched::sched_getaffinity(Pid::from_raw(0))
            .map_err(|e| format!("sched_getaffinity: {e}"))?;
        Ok((0..nix::sched::CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .map(|cpu| cpu as u32)
            .collect())
    }

    // set_mempolicy(2) has no libc or std wrapper: a raw syscall.
    #[allow(unsafe_code)]
    fn set_mempolicy(&self, policy: MemPolicy, nodes: &[u32]) -> Result<(), String> {
        let mode = match policy {
            MemPolicy::Default => MPOL_DEFAULT,
            MemPolicy::Preferred => MPOL_PREFERRED,
            MemPolicy::Bind => MPOL_BIND,
            MemPolicy::Other(n) => n,
        };
        let mut mask = [0u64; MASK_WORDS];
        for &node in nodes {
            let word = mask
                .get_mut(node as usize / 64)
                .ok_or_else(|| format!("NUMA node {node} is beyond {} nodes", MASK_WORDS * 64))?;
            *word |= 1u64 << (node % 64);
        }
        let (ptr, maxnode) = if nodes.is_empty() {
            (std::ptr::null(), 0)
        } else {
            (mask.as_ptr(), MAXNODE)
        };
        // SAFETY: set_mempolicy reads at most `maxnode - 1` bits from `ptr`, which points
        // to MASK_WORDS words that outlive the call (or is NULL with maxnode 0).
        let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, maxnode) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(format!(
                "set_mempolicy({policy}, nodes {}): {err}",
                list(nodes)
            ));
        }
        Ok(())
    }

    // get_mempolicy(2) has no libc or std wrapper: a raw syscall.
    #[allow(unsafe_code)]
    fn mempolicy(&self) -> Result<(MemPolicy, Vec<u32>), String> {
        let mut mode: libc::c_int = 0;
        let mut mask = [0u64; MASK_WORDS];
        // SAFETY: the kernel writes one int to `mode` and at most MASK_WORDS words to
        // `mask`; both live across the call. addr NULL + flags 0 = the thread's policy.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut libc::c_int,
                mask.as_mut_ptr(),
                MAXNODE,
                std::ptr::null::<libc::c_void>(),
                0 as libc::c_ulong,
            )
        };
        if rc != 0 {
            return Err(format!(
                "get_mempolicy: {}",
                std::io::Error::last_os_error()
            ));
        }
        let nodes = (0..MASK_WORDS * 64)
            .filter(|&bit| mask[bit / 64] & (1u64 << (bit % 64)) != 0)
            .map(|bit| bit as u32)
            .collect();
        let policy = match mode & !MPOL_MODE_FLAGS {
            MPOL_DEFAULT => MemPolicy::Default,
            MPOL_PREFERRED => MemPolicy::Preferred,
            MPOL_BIND => MemPolicy::Bind,
            other => MemPolicy::Other(other),
        };
        Ok((policy, nodes))
    }

    fn task_stderr(&self, line: &str) {
        // Escaped like every log line, so a value quoted in a warning stays one line in
        // the job's output too. The task's stderr is the user's output; a failed write
        // must not fail the task.
        let _ = writeln!(std::io::stderr(), "{}", crate::logger::printable(line));
    }
}

/// A cpulist of NUMA nodes is a line; a page is far more than any machine writes.
const ONLINE_MAX_BYTES: u64 = 4096;

fn read_online_numa_nodes() -> Result<Vec<u32>, String> {
    let path = "/sys/devices/system/node/online";
    // The one rule for every file the suite reads: never block on a FIFO, regular files only.
    let read = gpu_affinity::trust::open_regular(std::path::Path::new(path))
        .and_then(|f| gpu_affinity::trust::read_bounded_text(f, ONLINE_MAX_BYTES));
    match read {
        Ok(text) => CpuSet::parse_list(text.trim())
            .map(|set| set.iter().collect())
            .map_err(|e| format!("{path}: {e}")),
        // A kernel without NUMA support has one implicit node.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![0]),
        Err(e) => Err(format!("{path}: {e}")),
    }
}

/// "0,2,3" for the env and log lines.
pub fn list(items: &[u32]) -> String {
    items
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Affinity and memory policy are per thread: run on a thread of our own so the
    /// test harness's other threads keep theirs.
    #[test]
    fn affinity_and_policy_apply_and_read_back_on_this_kernel() {
        std::thread::spawn(|| {
            let os = LiveOs;
            let before = os.cpu_affinity().expect("getaffinity");
            let first = before.first().expect("at least one CPU");
            let one: CpuSet = [first].into_iter().collect();
            os.set_cpu_affinity(&one).expect("setaffinity");
            assert_eq!(os.cpu_affinity().expect("readback"), one);

            let nodes = os.online_numa_nodes().expect("online nodes");
            let node = nodes[0];
            os.set_mempolicy(MemPolicy::Bind, &[node]).expect("bind");
            assert_eq!(
                os.mempolicy().expect("readback"),
                (MemPolicy::Bind, vec![node])
            );
            os.set_mempolicy(MemPolicy::Preferred, &[node])
                .expect("preferred");
            assert_eq!(
                os.mempolicy().expect("readback"),
                (MemPolicy::Preferred, vec![node])
            );
            os.set_mempolicy(MemPolicy::Default, &[]).expect("default");
            assert_eq!(
                os.mempolicy().expect("readback"),
                (MemPolicy::Default, vec![])
            );
            // A node the kernel does not have is refused, not silently accepted.
            let absent = (0..1024)
                .find(|n| !nodes.contains(n))
                .expect("some absent node");
            assert!(os.set_mempolicy(MemPolicy::Bind, &[absent]).is_err());
        })
        .join()
        .expect("test thread");
    }
}
