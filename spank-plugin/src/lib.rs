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
//! | `CUDA_VISIBLE_DEVICES` | the rank's GPUs, in the step's own convention (global ids, or local ids under device confinement) |
//! | `CUDA_DEVICE_ORDER` | `PCI_BUS_ID` |
//! | `UCX_NET_DEVICES` | the rank's NICs as `mlx5_0:1,...` (only when it has NICs) |
//! | `GPU_AFFINITY_MODE` | `strict` or `prefer` |
//! | `GPU_AFFINITY_GPUS` | PCI addresses of the rank's GPUs |
//! | `GPU_AFFINITY_NICS` | RDMA (or netdev) names of the rank's NICs |
//! | `GPU_AFFINITY_CPUS` | the CPU mask as applied (read back), cpulist |
//! | `GPU_AFFINITY_MEMS` | NUMA nodes the memory policy was applied to (`strict`: bind, `prefer`: preferred) |
//!
//! # For admins (plugstack.conf)
//!
//! `required /usr/lib64/slurm/gpu_affinity.so [config=PATH] [sysfs_root=DIR] [default=off|prefer|strict] [enforce=prefer|strict]`
//!
//! Arguments are strict `key=value`; an unknown key or bad value is a load error naming
//! it. `config` (default `/etc/gpu-affinity/config.toml` when present) must be owned by
//! root and not writable by group or others; its `[plugin]` table may set `default`,
//! `enforce` and `sysfs_root` (plugstack arguments win). `enforce` is a floor: a user's
//! lower mode is raised, with an info line. Root-side inputs never come from the user's
//! environment. With a `sysfs_root` other than `/` (tests, replayed dumps), NUMA nodes
//! the running kernel lacks are reported as not applied instead of failing.
//!
//! Test builds (`--features panic-test`) also accept `test_panic=HOOK` (init,
//! init_post_opt, user_init, task_init, exit): slurmstepd panics inside that hook, and
//! the guard must turn it into a failed hook.
//!
//! # Structure
//!
//! `build.rs` binds the installed `<slurm/spank.h>`; `spank.rs` wraps it as a [`host::Host`];
//! one file per SPANK context (`init.rs`, `init_post_opt.rs`, `user_init.rs`,
//! `task_init.rs`, `exit.rs`) behind `dispatch.rs`; every export runs in `guard::run`.

mod apply;
mod dispatch;
mod exit;
mod fabric_env;
#[allow(dead_code)]
mod ffi;
mod guard;
mod host;
mod init;
mod init_post_opt;
mod logger;
mod mode;
mod options;
mod os;
mod settings;
#[cfg(not(test))]
mod spank;
mod state;
mod step;
mod task_init;
mod topology;
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
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 13] = *b"gpu_affinity\0";
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// Must match the running Slurm's major.minor: one build per Slurm series.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = ffi::SLURM_VERSION_NUMBER as c_uint;
#[unsafe(no_mangle)]
pub static spank_plugin_version: c_uint = 1;

/// The `--gpu-affinity` callback (srun/sbatch: remote = 0; slurmstepd: remote = 1).
#[cfg_attr(test, allow(dead_code))]
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
        options::on_option(&PLUGIN, value.as_deref(), remote != 0)
    })
}

#[cfg(not(test))]
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
            dispatch(&PLUGIN, hook, &host, &LiveOs, &argv)
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
