//! `gpu_affinity.so`: the gpu-affinity SPANK plugin.
//!
//! Binds every task of a GPU step to its GPU(s), the fabric NIC(s) nearest them and the
//! cores and memory of their NUMA node, following the plan of `gpu_affinity::solver`.
//!
//! # For users
//!
//! `srun|sbatch|salloc --gpu-affinity=MODE[,verbose]`, or the environment twin
//! `SLURM_GPU_AFFINITY=MODE[,verbose]` (batch scripts, slurmrestd); the option wins.
//!
//! * `strict`: a task whose binding has a problem fails before exec, with one line on
//!   srun's stderr naming the rank, what is wrong and what to do, e.g.
//!   `gpu-affinity: rank 3: GPU 0000:8a:00.0 has no fabric NIC on its PCIe switch or NUMA node; use --gpu-affinity=prefer or drain this node`.
//! * `prefer`: the best plan is applied; problems are warned about once per step.
//! * `off`: nothing is read or changed.
//! * `,verbose` (the documented verbose switch): each task prints its binding on its
//!   own stderr before exec, e.g.
//!   `gpu-affinity: rank 0 (local 0): mode strict GPUs 0000:18:00.0 (CUDA 0) NICs mlx5_0 CPUs 0-23 NUMA 0`.
//!
//! A step without GPUs is left alone in every mode, as are Slurm's batch, extern and
//! interactive steps. Each bound task gets:
//!
//! | variable | value |
//! |---|---|
//! | `CUDA_VISIBLE_DEVICES` | the rank's GPUs, in the step's own convention (global ids, or local ids under device confinement); on a node whose /dev/nvidiaN minors do not rise with PCI address, their positions in PCI_BUS_ID order instead, so CUDA opens the planned GPU |
//! | `CUDA_DEVICE_ORDER` | `PCI_BUS_ID` |
//! | `GPU_AFFINITY_MODE` | `strict` or `prefer` |
//! | `GPU_AFFINITY_GPUS` | PCI addresses of the rank's GPUs |
//! | `GPU_AFFINITY_NICS` | RDMA (or netdev) names of the rank's NICs |
//! | `GPU_AFFINITY_CPUS` | the CPU mask as applied (read back), cpulist |
//! | `GPU_AFFINITY_MEMS` | NUMA nodes the memory policy was applied to (`strict`: bind, `prefer`: preferred) |
//!
//! plus the vendor fabric environment of the node's profile (NCCL_IB_HCA, NCCL_TOPO_FILE,
//! FI_*, ...; node-wide values identical on every rank, and the rank's own, such as
//! `UCX_NET_DEVICES` = the rank's NICs as `mlx5_0:1,...` on InfiniBand and RoCE nodes), computed by
//! `gpu_affinity::fabric::step_fabric` exactly as `gpu-affinity explain` shows it. A
//! variable already in the user's environment is left alone unless the admin forces it.
//!
//! # For admins (plugstack.conf)
//!
//! `required /usr/lib64/slurm/gpu_affinity.so [config=PATH] [sysfs_root=DIR] [default=off|prefer|strict] [enforce=prefer|strict] [profiles_dir=DIR] [run_dir=DIR] [gres_conf=PATH]`
//!
//! Arguments are strict `key=value`; an unknown key or bad value is a load error naming
//! it. `config` (default `/etc/gpu-affinity/config.toml` when present) must be owned by
//! root and not writable by group or others; one named by `config=` that does not exist
//! is a load error in srun and sbatch as well as on the node. Its `[plugin]` table may set `default`,
//! `enforce`, `sysfs_root`, `run_dir` and `gres_conf`; its `[fabric]` table `force` (variables
//! exported even when the user set them, e.g. `force = ["NCCL_IB_HCA"]`) and
//! `profiles_dir`. Every plugstack key but `config` is one of these, checked by the same
//! function (`gpu_affinity::config::PluginKey`), so a bad value reads the same in both.
//! Plugstack arguments win; unknown tables and keys are errors (format
//! and checks: `gpu_affinity::config`, shared with `gpu-affinity explain`).
//! `enforce` is a floor: a user's lower mode is raised, with an info line. Root-side
//! inputs never come from the user's environment, and slurmstepd reads them as root (in
//! `init_post_opt`, before it drops to the job user for `user_init`), so `sysfs_root`,
//! `profiles_dir` and a vendor topology file may sit where job users cannot look. With a
//! `sysfs_root` other than `/`
//! (tests, replayed dumps), NUMA nodes the running kernel lacks are reported as not
//! applied instead of failing, and a profile's vendor NCCL topology file is looked up
//! under that root.
//!
//! * `profiles_dir` (default `/etc/gpu-affinity/profiles.d`): admin fabric profiles
//!   (`*.toml`) on top of the built-in ones; a missing directory is none. The directory
//!   and its files must be root's and not writable by group or others; job users need
//!   not read them. A malformed or
//!   untrusted profile is one error line naming file and line; `strict` steps are
//!   refused with it, `prefer` steps use the built-in profiles and warn.
//! * `run_dir` (default `/run/gpu-affinity`): where slurmstepd writes, as root, the NCCL
//!   topology generated for a step whose profile needs one and whose node lacks a fitting
//!   vendor file: `run_dir/job<JOBID>.<STEPID>.<slurmstepd pid>/nccl-topo.xml` (0755 /
//!   0644, never through a symlink), removed when the step ends; one a killed
//!   slurmstepd left is removed by the next step that writes one. `run_dir` is created
//!   0755 when absent; an existing one must be root's, not writable by others and
//!   searchable by job users, and every directory above it root's and not writable by
//!   others (unless sticky, like /tmp), with no symlink on the way. Beside the step
//!   directories it keeps the node's copy, `node.json` (root's, 0600): the machine a
//!   step read from sysfs, its fabric detection and the profile picked, used by the
//!   next step while the node's and profiles_dir's fingerprints are unchanged
//!   (`node_view.rs`, `copies.rs`); deleting it is always safe.
//! * A profile's vendor NCCL topology file must be root's and not writable by group or
//!   others; otherwise it is not used (a warning) and a topology is generated.
//!
//! Test builds (`--features panic-test`) also accept `test_panic=HOOK` (init,
//! init_post_opt, user_init, local_user_init, task_post_fork, task_init, exit): the
//! hook panics where it runs (slurmstepd; srun for local_user_init), and the guard must
//! turn it into a failed hook.
//!
//! # Structure
//!
//! `build.rs` binds the installed `<slurm/spank.h>`; `spank.rs` wraps it as a [`host::Host`];
//! one file per SPANK context (`init.rs`, `init_post_opt.rs`, `user_init.rs`,
//! `task_post_fork.rs`, `task_init.rs`, `exit.rs`, and `option_callback.rs` for the
//! option) behind `dispatch.rs`; every export runs in `guard::run`. Only those files
//! touch the process's `state::Plugin`; they pass settings, the option value and the
//! step's data (`step_data.rs`, a leaf) down as values. Per step in slurmstepd:
//! `init_post_opt` (root) settles the mode and, for a GPU step, reads the node's inputs
//! (`node.rs`: topology, admin profiles, the fabric detection, vendor NCCL topology
//! file); `user_init` (the job user) adds the job's own (GPU ids, tasks, the user's
//! environment) and solves (`step.rs`); `task_post_fork` (root) writes a generated
//! topology file; `task_init` applies the rank's part. `fabric_env.rs` loads the
//! profiles and calls the core's fabric facade with init_post_opt's detection;
//! `run_dir.rs` owns the per-step files.

// Unsafe code only at the C boundary, each place marked `allow` with why: the symbols
// and hooks Slurm loads, the SPANK API, the log calls and the memory-policy syscalls.
#![deny(unsafe_code)]

mod apply;
mod copies;
mod dispatch;
mod exit;
mod fabric_env;
// The SPANK and log declarations of Slurm's C API: extern items are unsafe by nature.
#[allow(dead_code, unsafe_code)]
mod ffi;
/// The Slurm series this build is for (generated by build.rs). Not every constant is
/// read by the plugin itself; they document the build in one place.
#[allow(dead_code)]
mod series {
    include!(concat!(env!("OUT_DIR"), "/series.rs"));
}
mod guard;
mod host;
mod init;
mod init_post_opt;
mod local_user_init;
mod logger;
mod mode;
mod node;
mod node_view;
mod option_callback;
mod options;
mod os;
mod placement;
mod run_dir;
mod settings;
// The SPANK handle: every item read goes through a C call on a raw pointer.
#[cfg(not(test))]
#[allow(unsafe_code)]
mod spank;
mod state;
mod step;
mod step_data;
mod sysfs_machine;
mod task_init;
mod task_post_fork;
mod timing;
mod user_init;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::os::raw::{c_char, c_int, c_uint};

use crate::state::Plugin;

/// The plugin's state for this process (srun, sbatch or one step's slurmstepd).
static PLUGIN: Plugin = Plugin::new();

// Slurm's plugin loader reads these as data symbols: arrays, not pointers.
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 13] = *b"gpu_affinity\0";
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// Must match the running Slurm's major.minor: one build per Slurm series. build.rs
/// sets it from the headers, or to the series it was asked for when that series shares
/// the headers' recorded SPANK declarations (25.05 and 25.11 from 26.05's).
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = series::PLUGIN_VERSION as c_uint;
/// What this build was made for and from (`strings gpu_affinity.so`, scripts/build-plugins).
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static gpu_affinity_built_for: [u8; series::BUILT_FOR_C.len()] = series::BUILT_FOR_C;
/// Which unwinder this build linked, `gpu-affinity unwinder: static libgcc_eh` or
/// `... the toolchain's (why)` (spank-plugin/build/unwinder.rs), read by the test that checks it.
#[allow(unsafe_code)] // kept in the library by name, like gpu_affinity_built_for
#[unsafe(no_mangle)]
pub static gpu_affinity_unwinder: [u8; series::UNWINDER_C.len()] = series::UNWINDER_C;
/// Slurm 25.05+ reads this when `slurm_spank_init` fails: its default,
/// ESPANK_NODE_FAILURE, drains the node (spank(8)). A user's bad value, a strict refusal
/// or one admin's broken plugstack line must fail that job, never drain every node that
/// reads the line, so the plugin asks for ESPANK_JOB_FAILURE. Headers before 25.05 do
/// not declare it (and those Slurms never look it up).
#[cfg(spank_init_failure_mode)]
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static slurm_spank_init_failure_mode: c_int = ffi::ESPANK_JOB_FAILURE as c_int;
#[allow(unsafe_code)] // a symbol Slurm looks up by name
#[unsafe(no_mangle)]
pub static spank_plugin_version: c_uint = 1;

/// The `--gpu-affinity` callback (srun/sbatch: remote = 0; slurmstepd: remote = 1).
// Slurm calls it with a C string.
#[cfg_attr(test, allow(dead_code))]
#[allow(unsafe_code)]
pub(crate) unsafe extern "C" fn option_callback(
    _val: c_int,
    optarg: *const c_char,
    remote: c_int,
) -> c_int {
    guard::run("option", || {
        let value = if optarg.is_null() {
            None
        } else {
            // SAFETY: Slurm passes a NUL-terminated argument valid for the call.
            Some(
                unsafe { std::ffi::CStr::from_ptr(optarg) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        option_callback::on_option(&PLUGIN, value.as_deref(), remote != 0)
    })
}

// The hooks Slurm calls by name, with raw handles and argv.
#[cfg(not(test))]
#[allow(unsafe_code)]
mod exports {
    use super::*;
    use crate::dispatch::{Hook, dispatch};
    use crate::ffi::spank_t;
    use crate::os::LiveOs;
    use crate::spank::SpankHost;

    /// One guarded entry for every hook.
    unsafe fn hook(hook: Hook, sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
        guard::run(hook.name(), || {
            // SAFETY: `av` holds `ac` NUL-terminated plugstack arguments for this call.
            let argv = unsafe { args(ac, av) };
            // SAFETY: `sp` is this hook's handle and is used only inside it.
            let host = unsafe { SpankHost::new(sp) };
            let timer = timing::Hook::start(hook.name());
            let result = dispatch(&PLUGIN, hook, &host, &LiveOs, &argv);
            timer.finish();
            result
        })
    }

    unsafe fn args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
        if av.is_null() {
            return Vec::new();
        }
        (0..usize::try_from(ac).unwrap_or(0))
            .filter_map(|i| {
                // SAFETY: i < ac, and Slurm's argv has ac entries.
                let p = unsafe { *av.add(i) };
                // SAFETY: each non-NULL entry is a NUL-terminated string.
                (!p.is_null()).then(|| {
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_string_lossy()
                        .into_owned()
                })
            })
            .collect()
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_init(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::Init, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_init_post_opt(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::InitPostOpt, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_user_init(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::UserInit, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_local_user_init(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::LocalUserInit, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_task_post_fork(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::TaskPostFork, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_task_init(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::TaskInit, sp, ac, av) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn slurm_spank_exit(
        sp: spank_t,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        // SAFETY: forwarded from Slurm unchanged.
        unsafe { hook(Hook::Exit, sp, ac, av) }
    }
}
